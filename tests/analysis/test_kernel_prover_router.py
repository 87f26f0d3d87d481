"""The MoE router kernel (`moe_router_kernel`, unit kind "moe_router"): each row's expert ids
and weights are proved a function of that row's logits alone (symbolic M against the M = 1
launch on the row), at the shipped (E, top_k, normalize); planted bugs in copies of
`_moe_router_kernel.py` that read another row or store at another row are refuted."""

from __future__ import annotations

import pytest

pytest.importorskip("z3")

from samebits.analysis.kernel_prover.certify import prove_spec  # noqa: E402
from samebits.analysis.kernel_prover.moe import router_specs  # noqa: E402
from samebits.analysis.kernel_prover.specs import unit_specs  # noqa: E402
from samebits.kernels.triton.certified import units as U  # noqa: E402

ROUTER = U.KERNEL_DIR / "_moe_router_kernel.py"


def spec(experts: int = 8, top_k: int = 2, normalize: bool = True):
    (sp,) = router_specs("t", experts, top_k, normalize)
    return sp


def run_mutant(sp, tmp_path, old: str, new: str):
    text = ROUTER.read_text()
    assert text.count(old) == 1, f"mutation anchor not found exactly once: {old!r}"
    path = tmp_path / ROUTER.name
    path.write_text(text.replace(old, new))
    return prove_spec(sp, path)[0]


@pytest.mark.parametrize("experts, top_k, normalize",
                         [(128, 8, True), (8, 2, True), (8, 3, True), (6, 2, False),
                          (16, 8, True)])  # fmt: skip
def test_router_rows_are_proved_batch_invariant(experts, top_k, normalize):
    res = prove_spec(spec(experts, top_k, normalize))[0]
    assert res.status == "proved", (res.unsupported, res.counterexample)
    # the custom-combine row max is in the proof's layout symbols (not an enumerated max)
    assert any("_max_nan" in x for x in res.stats["layout_reductions"])


ROUTER_MUTANTS = {
    # the softmax's max over the whole block of rows (another row's logit)
    "block_max": ("    p = tl.where(lane < E, _portable_exp(logits - _row_max(logits)), 0.0)\n",
                  "    p = tl.where(lane < E, _portable_exp(logits - tl.reduce(_row_max(logits), "
                  "0, _max_nan, keep_dims=True)), 0.0)\n"),
    # ties broken by the highest id among the ties of all rows of the program
    "tie_highest_other_row": (
        "    pick = tl.min(tl.where(remaining == top, lane, BLOCK_E), axis=1, keep_dims=True)\n",
        "    pick = tl.max(tl.max(tl.where(remaining == top, lane, 0), axis=1, keep_dims=True), "
        "axis=0, keep_dims=True)\n"),
    # weights stored at the next row's offset
    "weights_next_row": ("    tl.store(w_ptr + out, weights, mask=live)\n",
                         "    tl.store(w_ptr + out + TOP_K, weights, mask=live)\n"),
}  # fmt: skip
MUTANT_REASONS = {"block_max": "w: reads logits at different indices",
                  "tie_highest_other_row": "ids: reads logits at different indices",
                  "weights_next_row": "does not write this element of w"}  # fmt: skip


@pytest.mark.parametrize("name", sorted(ROUTER_MUTANTS))
def test_router_mutants_are_refuted(name, tmp_path):
    old, new = ROUTER_MUTANTS[name]
    res = run_mutant(spec(), tmp_path, old, new)
    assert res.status == "refuted", (res.status, res.unsupported)
    assert MUTANT_REASONS[name] in res.counterexample["reason"], res.counterexample


def _ops(path) -> set[str]:
    """The operation names in the value terms of the weights the kernel at ``path`` stores."""
    from samebits.analysis.kernel_prover.symbolic.execution import Execution
    from samebits.analysis.kernel_prover.symbolic.source import KernelSource
    from samebits.analysis.kernel_prover.terms import _children

    sp = spec()
    ex = Execution("L", KernelSource.parse(path.read_text(), path.name), sp.left).run()
    seen, stack, out = set(), [st.value for st in ex.stores_of("w")], set()
    while stack:
        t = stack.pop()
        if t.id not in seen:
            seen.add(t.id)
            out.add(t.op)
            stack.extend(_children(t))
    return out


def test_nan_propagating_maximum_is_its_own_operation(tmp_path):
    """``tl.maximum(..., propagate_nan=ALL)`` is the symbol ``max_nan``, never the plain
    ``max`` (a kernel whose max drops NaN computes other values)."""
    old = "    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)\n"
    text = ROUTER.read_text()
    assert text.count(old) == 1
    plain = tmp_path / ROUTER.name
    plain.write_text(text.replace(old, "    return tl.maximum(a, b)\n"))
    shipped, mutated = _ops(ROUTER), _ops(plain)
    assert "max_nan" in shipped and "max" not in shipped
    assert "max" in mutated and "max_nan" not in mutated


def test_router_units_of_the_moe_models():
    from samebits.model.presets import PRESETS

    keys = {p: {u["key"] for u in U.units_for(U.dims_of(PRESETS[p])) if u["kind"] == "moe_router"}
            for p in ("qwen3-30b-a3b", "mixtral-8x7b")}  # fmt: skip
    assert keys == {"qwen3-30b-a3b": {"moe.router.e128.k8.norm"},
                    "mixtral-8x7b": {"moe.router.e8.k2.norm"}}  # fmt: skip
    (unit,) = [u for u in U.units_for(U.dims_of(PRESETS["qwen3-30b-a3b"]))
               if u["kind"] == "moe_router"]  # fmt: skip
    assert [s.name for s in unit_specs(unit)] == ["moe.router.e128.k8.norm.batch"]
    spec_ = U.specialization(unit)
    assert (spec_["block_t"], spec_["log_e"], spec_["block_k"]) == (4, 7, 8)


def test_router_unit_certificate_gates_fails_closed_and_goes_stale(tmp_path):
    """A certified router unit passes the gate; without its certificate, with another kernel
    text or another launch constant (BLOCK_T) the gate names the problem (fail closed)."""
    import json

    from samebits.analysis.kernel_prover.certify import certify_units
    from samebits.kernels.triton.certified import gate

    unit = U.router_unit(8, 2, True)
    assert gate.check_unit(unit, tmp_path)[0] is not None  # no certificate: refused
    (record,) = certify_units([unit], tmp_path)
    assert record["proved"]
    path = tmp_path / f"{unit['key']}.json"
    assert gate.check_unit(unit, tmp_path)[0] is None
    text = path.read_text()
    for change in (lambda r: r.update(kernel_source_sha256="0" * 64),
                   lambda r: r["specialization"].update(block_t=1)):  # fmt: skip
        rec = json.loads(text)
        change(rec)
        path.write_text(json.dumps(rec))
        assert gate.check_unit(unit, tmp_path)[0] is not None
