"""The fused split-K sum + residual add + RMSNorm (`sum_add_rms_norm_kernel`, unit kind
"fused"): proved against three kernel files (its own, the row kernels it imports `_rms_apply`
from, the linear kernels of the op-by-op path). Goal 1 (batch invariance) and equivalence with
the op-by-op path (split-K grid, ordered_sum_kernel, rms_norm_kernel with the residual add) are
proved on a tiny split weight; planted bugs in copies of `_fused_kernels.py` are refuted; the
certificate goes stale when any of the three files changes."""

from __future__ import annotations

import json
import shutil

import pytest

pytest.importorskip("z3")

from samebits.analysis.kernel_prover import specs as S  # noqa: E402
from samebits.analysis.kernel_prover.certify import prove_spec, reusable  # noqa: E402
from samebits.kernels.triton.certified import gate  # noqa: E402
from samebits.kernels.triton.certified import units as U  # noqa: E402

FUSED = U.KERNEL_DIR / "_fused_kernels.py"
SHAPE = ("down", 64, 512)  # S = 4, two 64-steps per range (the prover tests' split weight)
PADDED = ("down", 48, 512)  # BLOCK 64 > N: masked lanes in the row (as SmolLM2's 576 in 1024)
FAST = "split_grid-bm64-bn128-w4-s4"  # the quickest launch to prove (one n-tile of the row)
SHIPPED_UNIT = "fused.linear_add_rms_norm.o.256x256"  # tiny-llama's o_proj (S = 2)


def specs(bias: bool = False, shape: tuple = SHAPE) -> dict:
    """The fused specs of a tiny split weight by name, less the model tag."""
    tag = f"t.linear_add_rms_norm.{shape[0]}." + ("bias." if bias else "")
    return {s.name.removeprefix(tag): s for s in S.linear_add_rms_specs("t", *shape, bias)}


def fast(goal: str) -> str:
    """The spec name of ``goal`` ("batch" or "equiv") at the quickest launch."""
    return f"batch.{FAST}" if goal == "batch" else f"equiv.{FAST}~per-op"


def run_mutant(spec, tmp_path, old: str, new: str):
    """Prove ``spec`` against a copy of the fused kernel file with ``old`` replaced by ``new``
    (the other files are the shipped ones, as `samebits certify --source` proves)."""
    text = FUSED.read_text()
    assert text.count(old) == 1, f"mutation anchor not found exactly once: {old!r}"
    path = tmp_path / FUSED.name
    path.write_text(text.replace(old, new))
    return prove_spec(spec, path)[0]


def assert_refuted(res, *needles):
    assert res.status == "refuted", (res.status, res.unsupported)
    for n in needles:
        assert n in repr(res.counterexample), (n, res.counterexample)


@pytest.mark.parametrize("name", sorted(specs()))
def test_fused_path_is_proved_for_every_grid_launch(name):
    res, path, _ = prove_spec(specs()[name])
    assert res.status == "proved", (res.unsupported, res.counterexample)
    assert res.stats["compared_store_pairs"] >= 2  # out and the residual
    assert path.endswith("_fused_kernels.py")


@pytest.mark.parametrize(
    "bias, shape", [(True, SHAPE), (False, PADDED), (True, PADDED)],
    ids=["bias", "masked-lanes", "masked-lanes-bias"],
)  # fmt: skip
@pytest.mark.parametrize("goal", ["batch", "equiv"])
def test_fused_path_with_bias_or_masked_lanes_is_proved(goal, bias, shape):
    res = prove_spec(specs(bias, shape)[fast(goal)])[0]
    assert res.status == "proved", (res.unsupported, res.counterexample)


def test_masked_lanes_holding_another_value_are_refuted(tmp_path):
    """Lanes past N enter the row's sum of squares: in the op-by-op path they are +0.0 (the
    masked load of y), so a fused kernel filling them with 1.0 computes another norm."""
    old = "total = tl.load(p_ptr + offs, mask=mask, other=0.0)"
    res = run_mutant(specs(False, PADDED)[fast("equiv")], tmp_path, old,
                     old.replace("other=0.0", "other=1.0"))  # fmt: skip
    assert_refuted(res, "cast:bf16 vs const:bf16")


ADD = "        total = total + tl.load(p_ptr + s * mn + offs, mask=mask, other=0.0)\n"


@pytest.mark.parametrize(
    "bias, old, new, needle",
    [
        # partial 0, then S-1, ..., 1: another order of the same partials
        (False, "s * mn + offs", "(SPLITS - s) * mn + offs", "reads w at different indices"),
        # each partial added on the left of the running total
        (False, ADD, ADD.replace("total + tl.load(", "tl.load(").replace(")\n", ") + total\n"),
         "add:fp32 vs dotk:fp32"),
        # the row not rounded to out's dtype before the residual add
        (False, "r = total.to(out_ptr.dtype.element_ty).to(tl.float32)", "r = total",
         "add:fp32 vs cast:fp32"),
        # the bias never added
        (True, "total = total + tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)",
         "total = total", "dotk:fp32 vs read:fp32"),
        # the residual added on the right
        (False, "r = tl.load(res_ptr + offs, mask=mask, other=0.0) + r",
         "r = r + tl.load(res_ptr + offs, mask=mask, other=0.0)", "read:fp32 vs cast:fp32"),
    ],
    ids=["partials-order", "add-operands", "no-rounding", "no-bias", "residual-order"],
)  # fmt: skip
def test_mutants_break_equivalence_with_the_op_by_op_path(tmp_path, bias, old, new, needle):
    spec = specs(bias)[fast("equiv")]
    assert_refuted(run_mutant(spec, tmp_path, old, new), needle)


def test_batch_goal_alone_cannot_see_a_consistent_reordering(tmp_path):
    """The reordered sum is the same wrong function for every batch: batch invariance is
    proved, the op-by-op equivalence (above) refutes it. The unit needs both."""
    spec = specs()[fast("batch")]
    res = run_mutant(spec, tmp_path, "s * mn + offs", "(SPLITS - s) * mn + offs")
    assert res.status == "proved", (res.unsupported, res.counterexample)


def test_a_row_dependent_bias_index_breaks_batch_invariance(tmp_path):
    spec = specs(bias=True)[fast("batch")]
    res = run_mutant(spec, tmp_path, "tl.load(b_ptr + cols", "tl.load(b_ptr + offs")
    assert_refuted(res, "reads bias at different indices")


def test_a_helper_imported_from_the_wrong_file_is_rejected(tmp_path):
    spec = specs()[fast("batch")]
    res = run_mutant(spec, tmp_path, "triton._row_kernels import", "triton._linear_kernels import")
    assert res.status == "rejected-unsupported"
    assert "imports _rms_apply from _linear_kernels.py" in res.unsupported


def test_a_helper_whose_file_is_not_joined_is_rejected():
    from samebits.analysis.kernel_prover.prover import prove
    from samebits.analysis.kernel_prover.symbolic.source import KernelSource

    spec = specs()[fast("batch")]
    linear = U.KERNEL_DIR / "_linear_kernels.py"
    src = KernelSource.parse(FUSED.read_text(), FUSED.name).with_functions(
        KernelSource.parse(linear.read_text(), linear.name)
    )  # not joined with _row_kernels.py (join itself refuses that: test above)
    res = prove(src, spec.goal, spec.left, spec.right, spec.m_left)
    assert res.status == "rejected-unsupported"
    assert "_rms_apply is imported from _row_kernels.py" in res.unsupported


def test_units_only_for_split_o_and_down_weights():
    d = dict(hidden=256, inter=768, heads=4, kv_heads=2, head_dim=64, vocab=320, bias=False,
             head_norm=False)  # fmt: skip
    fused = [u for u in U.units_for(d) if u["kind"] == "fused"]
    assert [u["key"] for u in fused] == [
        "fused.linear_add_rms_norm.o.256x256",  # S = 2
        "fused.linear_add_rms_norm.down.256x768",  # S = 4
    ]
    tiny = dict(d, hidden=64, inter=128, heads=4, head_dim=16)  # o 64x64, down 64x128: S = 1
    assert not [u for u in U.units_for(tiny) if u["kind"] == "fused"]
    unit = fused[0]
    spec = U.specialization(unit)
    assert (spec["block"], spec["warps"]) == (256, 1)
    assert spec["grid_launches"][0] == "split_grid-bm16-bn32-w4-s4"
    names = [s.name for s in S.unit_specs(unit)]
    assert len(names) == 2 * len(spec["grid_launches"])
    assert names[:2] == [f"{unit['key']}.batch.split_grid-bm16-bn32-w4-s4",
                         f"{unit['key']}.equiv.split_grid-bm16-bn32-w4-s4~per-op"]  # fmt: skip


def test_grid_launches_are_every_split_grid_launch_of_any_m():
    """Every launch `TritonLinear.grid_partials` may run (any M, with and without TMA) has its
    fused specs: the launches are those of `choose_launch` of kind split_grid."""
    from samebits.kernels.triton.launches import SPLIT_GRID, choose_launch
    from samebits.kernels.triton.splitplan import split_plan

    for n, k, role in ((4096, 14336, "down"), (4096, 4096, "o"), (256, 256, "o")):
        plan = split_plan(n, k, role)
        seen = {choose_launch(plan, m, tma) for m in [*range(1, 300), 1 << 20]
                for tma in (True, False)}  # fmt: skip
        launches = U.grid_launches(plan)
        assert len(set(launches)) == len(launches) == 4
        assert set(launches) == {la for la in seen if la.kind == SPLIT_GRID}


@pytest.fixture
def kernel_copy(tmp_path, monkeypatch):
    """The kernel directory copied to ``tmp_path`` and used as the shipped one."""
    kdir = tmp_path / "triton"
    shutil.copytree(U.KERNEL_DIR, kdir, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(U, "KERNEL_DIR", kdir)
    return kdir


@pytest.mark.parametrize(
    "file, old, new",
    [
        ("_linear_kernels.py", "        total = total + tl.load(p_ptr + s * mn + i",
         "        total = tl.load(p_ptr + s * mn + i"),
        ("_row_kernels.py", "    mean = tl.math.div_rn(", "    mean = tl.math.div_rn(  # changed\n"),
    ],
    ids=["ordered_sum_kernel", "rms_apply"],
)  # fmt: skip
def test_a_change_to_any_file_proved_against_makes_the_fused_unit_stale(
    kernel_copy, tmp_path, file, old, new
):
    src = gate.SHIPPED_DIR / f"{SHIPPED_UNIT}.json"
    certs = tmp_path / "certs"
    certs.mkdir()
    shutil.copy(src, certs / src.name)
    rec = json.loads(src.read_text())
    unit = rec["unit"]
    assert gate.check_unit(unit, certs)[0] is None
    by_name = {c["specialization"]: c for c in rec["certificates"]}
    assert all(reusable(by_name[s.name], s) for s in S.unit_specs(unit))
    text = (kernel_copy / file).read_text()
    assert text.count(old) == 1
    (kernel_copy / file).write_text(text.replace(old, new))
    assert gate.check_unit(unit, certs)[0] == f"stale: {file} changed since it was proved"
    assert not any(reusable(by_name[s.name], s) for s in S.unit_specs(unit))


def test_a_fused_record_without_its_other_sources_is_stale(tmp_path):
    """A record that names only the fused kernel file (no `also_proved_against`) does not show
    what the proof read: the gate refuses it."""
    rec = json.loads((gate.SHIPPED_DIR / f"{SHIPPED_UNIT}.json").read_text())
    del rec[U.ALSO_RECORD]
    (tmp_path / f"{SHIPPED_UNIT}.json").write_text(json.dumps(rec))
    problem = gate.check_unit(rec["unit"], tmp_path)[0]
    assert problem == "stale: _linear_kernels.py, _row_kernels.py changed since it was proved"


def test_one_file_certificates_keep_their_form_and_stay_reusable():
    """Units proved against one file record no other sources, and their shipped certificates
    are reused as they are."""
    rec = json.loads((gate.SHIPPED_DIR / "linear.o.256x256.json").read_text())
    assert U.ALSO_RECORD not in rec
    assert all(U.ALSO_RECORD not in c for c in rec["certificates"])
    by_name = {c["specialization"]: c for c in rec["certificates"]}
    assert all(reusable(by_name[s.name], s) for s in S.unit_specs(rec["unit"]))
