"""The gate on class certificates (issue 28): a concrete unit without its own certificate is
covered by its shape class's certificate when that is proved, unchanged, of today's class
specialization, and the unit's shape lies inside the bounds every proof assumed."""

from __future__ import annotations

import json

import pytest

from samebits.analysis import certify_cli
from samebits.kernels.triton.certified import gate
from samebits.kernels.triton.certified import units as U

pytest.importorskip("z3")


def _rms(width: int) -> dict:
    return dict(key=f"rows.rms_norm.{width}", kind="rows", op="rms_norm", width=width)


@pytest.fixture(scope="module")
def classdir(tmp_path_factory):
    """The class certificate of rms_norm widths 33..64, proved for real (under a second)."""
    from samebits.analysis.kernel_prover.certify import certify_units

    d = tmp_path_factory.mktemp("classes")
    (rec,) = certify_units([U.symbolic_unit(_rms(48))], d)
    assert rec["proved"] and rec[U.SHAPE_RECORD] == {"WIDTH": [33, 64]}
    return d


def _edit(path, fn):
    rec = json.loads(path.read_text())
    fn(rec)
    path.write_text(json.dumps(rec))


def test_the_class_certificate_covers_every_width_of_the_class(classdir):
    for w in (33, 48, 64):
        assert gate.check_unit(_rms(w), classdir)[0] is None
    problem, _ = gate.check_unit(_rms(32), classdir)
    assert problem == "missing (nor its class certificate rows.rms_norm.w17-32)"
    assert gate.check_unit(_rms(65), classdir)[0].startswith("missing")


def test_check_lists_a_class_unit_as_valid(classdir, capsys):
    assert certify_cli.main(["--check", str(classdir)]) == 0
    assert "1/1 valid" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("edit", "needle"),
    [
        (lambda r: r.update(kernel_source_sha256="0" * 64), "stale: _row_kernels.py changed"),
        (lambda r: r["specialization"].update(warps=8), "stale: the launches / constexprs"),
        (lambda r: r.update(proved=False), "not proved"),
        # a record that claims more widths than its proofs assumed
        (lambda r: r.update(shape={"WIDTH": [33, 128]}), "its proofs do not state one"),
        (lambda r: [c["goal"].update(shape={"WIDTH": [40, 64]}) for c in r["certificates"]],
         "its proofs do not state one"),
    ],
)  # fmt: skip
def test_an_invalid_class_certificate_refuses(classdir, tmp_path, edit, needle):
    d = tmp_path / "c"
    d.mkdir()
    name = "rows.rms_norm.w33-64.json"
    (d / name).write_bytes((classdir / name).read_bytes())
    _edit(d / name, edit)
    problem, _ = gate.check_unit(_rms(48), d)
    assert problem and problem.startswith("class certificate rows.rms_norm.w33-64: ")
    assert needle in problem, problem


def test_a_stale_own_certificate_falls_back_to_a_valid_class(classdir, tmp_path):
    d = tmp_path / "c"
    d.mkdir()
    name = "rows.rms_norm.w33-64.json"
    (d / name).write_bytes((classdir / name).read_bytes())
    (d / "rows.rms_norm.48.json").write_text(json.dumps({"unit": _rms(48), "proved": False}))
    assert gate.check_unit(_rms(48), d)[0] is None
    (d / name).unlink()
    assert gate.check_unit(_rms(48), d)[0].startswith("not proved")


def test_proof_units_prefer_the_class():
    units = certify_cli.units_of(["published:qwen3-4b"])
    keys = {u["key"] for u in certify_cli.proof_units(units)}
    assert "linear.column.fp32.N16384-16777216.s1.k64" in keys  # lm_head: any vocab, any K
    assert "rows.rms_norm.w2049-4096" in keys and "linear.lm_head.151936x2560" not in keys
    assert "fused.linear_add_rms_norm.o.2560x4096" in keys  # PER_SHAPE_KINDS
    per_shape = {u["key"] for u in certify_cli.proof_units(units, per_shape=True)}
    assert per_shape == {u["key"] for u in units}


def test_more_rows_than_the_int32_obligations_assume_refuse(monkeypatch, capsys):
    class Dep:
        components = {"certificates": {"status": "certified"}}

    monkeypatch.delenv(gate.ENV_ALLOW, raising=False)
    gate.check_rows_bound(Dep(), U.M_MAX)
    gate.check_rows_bound(object(), U.M_MAX + 1)  # no certificates: not gated
    with pytest.raises(gate.UncertifiedKernelError, match="int32 obligations"):
        gate.check_rows_bound(Dep(), U.M_MAX + 1)
    monkeypatch.setenv(gate.ENV_ALLOW, "1")
    gate.check_rows_bound(Dep(), U.M_MAX + 1)
    assert "running uncertified" in capsys.readouterr().err


def test_contexts_past_the_attention_int32_bounds_refuse(monkeypatch, capsys):
    class Dep:
        components = {"certificates": {"status": "certified"}}

    b = U.ATTENTION_BOUNDS
    monkeypatch.delenv(gate.ENV_ALLOW, raising=False)
    gate.check_attention_bounds(Dep(), b["POS_MAX"], b["BLOCKS_MAX"])
    gate.check_attention_bounds(object(), b["POS_MAX"] + 1, 1)  # no certificates: not gated
    for too_big in ((b["POS_MAX"] + 1, 1), (4096, b["BLOCKS_MAX"] + 1)):
        with pytest.raises(gate.UncertifiedKernelError, match="attention certificates' int32"):
            gate.check_attention_bounds(Dep(), *too_big)
    monkeypatch.setenv(gate.ENV_ALLOW, "1")
    gate.check_attention_bounds(Dep(), b["POS_MAX"] + 1, 1)
    assert "running uncertified" in capsys.readouterr().err


def _down(n: int, k: int) -> dict:
    return dict(key=f"linear.down.{n}x{k}", kind="linear", role="down", n=n, k=k, bias=False)


def test_a_k_class_certificate_covers_every_k_of_its_plan_kind(tmp_path):
    """The shipped S = 4 row-parallel K class: any K = 256 * STEPS (the split plan's S = 4)
    and any N >= 897, checked by constraints; a record claiming more K than its proofs
    refuses; K = 3200 (S = 2) is another class's."""
    name = "linear.row_parallel.bf16.N897-16777216.s4.k64.json"
    d = tmp_path / "c"
    d.mkdir()
    (d / name).write_bytes((gate.SHIPPED_DIR / name).read_bytes())
    for n, k in ((3072, 3072), (5120, 14336), (897, 512), (U.N_MAX, U.K_MAX)):
        assert gate.check_unit(_down(n, k), d)[0] is None, (n, k)
    assert "nor its class certificate" in gate.check_unit(_down(5120, 3200), d)[0]
    _edit(d / name, lambda r: r["shape"].update(STEPS=[2, 1 << 20]))
    problem = gate.check_unit(_down(3072, 3072), d)[0]
    assert problem and "its proofs do not state one symbolic shape" in problem
