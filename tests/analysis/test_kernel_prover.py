"""The real kernels certify; certificates carry what they must; unsupported code is rejected
with its line; the package imports without Z3."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("z3")

from samebits.analysis.kernel_prover import specs as S  # noqa: E402
from samebits.analysis.kernel_prover.certify import certify  # noqa: E402
from samebits.analysis.kernel_prover.prover import prove  # noqa: E402
from samebits.analysis.kernel_prover.symbolic.source import KernelSource  # noqa: E402

KDIR = Path(__file__).resolve().parents[2] / "src" / "samebits" / "kernels" / "triton"


def _prove(spec, text=None):
    text = text if text is not None else (KDIR / spec.kernel_file).read_text()
    return prove(
        KernelSource.parse(text, spec.kernel_file), spec.goal, spec.left, spec.right, spec.m_left
    )


@pytest.mark.parametrize("spec", S.all_specs(("tiny",)), ids=lambda s: s.name)
def test_tiny_model_specializations_are_proved(spec):
    res = _prove(spec)
    assert res.status == "proved", (res.unsupported, res.counterexample)


@pytest.mark.parametrize("spec", S.row_specs("llama-3-8b"), ids=lambda s: s.name)
def test_llama_row_kernels_are_proved(spec):
    res = _prove(spec)
    assert res.status == "proved", (res.unsupported, res.counterexample)


SPLIT = {s.name: s for s in S.linear_specs("tiny", shapes=[("down", 64, 512)])}


@pytest.mark.parametrize(
    "name",
    [
        "tiny.down.batch.split_grid-bm16-bn32-w4-s4",
        "tiny.down.equiv.split_grid-bm16-bn32-w4-s4~ranges-bm128-bn128-w8-s4",
        "tiny.down.batch.tma-bm128-bn128-w8-s4-g8",
        "tiny.down.equiv.split_grid-bm16-bn32-w4-s4~tma-bm128-bn128-w8-s4-g8",
    ],
)
def test_split_grid_and_ordered_sum_match_the_plan(name):
    res = _prove(SPLIT[name])
    assert res.status == "proved", (res.unsupported, res.counterexample)


def test_every_launch_the_plan_may_choose_is_covered():
    from samebits.kernels.triton.launches import choose_launch, launch_table
    from samebits.kernels.triton.splitplan import split_plan

    for n, k, role in ((4096, 14336, "down"), (6144, 4096, "qkv"), (28672, 4096, "gate_up")):
        plan = split_plan(n, k, role)
        launches = S.plan_launches(plan)
        for m in (1, 2, 16, 17, 64, 65, 128, 129, 256, 257, 1024, 1025, 8192, 1 << 20):
            assert choose_launch(plan, m) in launches
            assert choose_launch(plan, m, tma=False) in launches
        rows = {(r[2], r[3]) for r in launch_table(plan)}
        assert {(la.block_m, la.block_n) for la in launches} == rows
        kinds = {"ranges", "tma"} | ({"split_grid"} if plan.splits > 1 else set())
        assert {la.kind for la in launches} == kinds


def test_llama_qkv_certificate(tmp_path):
    certs = certify(tmp_path, models=("llama-3-8b",), kinds=("linear",),
                    select="llama-3-8b.qkv.batch.ranges-bm16")  # fmt: skip
    assert len(certs) == 1
    cert = json.loads((tmp_path / f"{certs[0]['specialization']}.json").read_text())
    assert cert["result"]["status"] == "proved"
    src = (KDIR / "_linear_kernels.py").read_bytes()
    import hashlib

    assert cert["kernel_source_sha256"] == hashlib.sha256(src).hexdigest()
    assert "tl.dot-k-atom-chain" in cert["assumptions"]
    assert "H200" in cert["assumptions"]["tl.dot-k-atom-chain"]
    assert cert["z3_version"] and cert["prover"]["version"]
    assert cert["goal"]["kind"] == "batch_invariance"
    assert cert["left_launch"][0]["args"]["BLOCK_K"] == 64
    assert json.loads((tmp_path / "summary.json").read_text())["proved"] == 1


def test_unsupported_construct_is_rejected_with_its_line():
    text = (KDIR / "_row_kernels.py").read_text()
    old = "    mask = (h < HEADS) & (i < HALF)\n"
    assert text.count(old) == 1
    text = text.replace(old, old + "    while HEADS > 0:\n        pass\n")
    spec = {s.name: s for s in S.row_specs("tiny")}["tiny.rope_q.batch"]
    res = _prove(spec, text)
    line = text.splitlines().index("    while HEADS > 0:") + 1
    assert res.status == "rejected-unsupported"
    assert f"_row_kernels.py:{line}" in res.unsupported and "While" in res.unsupported


def test_cli_writes_certificates(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "samebits.analysis.kernel_prover", "--models", "tiny",
         "--kinds", "rows", "--select", "silu", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "1/1 proved" in out.stdout
    assert (tmp_path / "tiny.silu_mul.batch.json").exists()


def test_package_import_does_not_need_z3():
    code = (
        "import sys, samebits.analysis, samebits.analysis.kernel_prover as k; "
        "assert 'z3' not in sys.modules; assert callable(k.certify)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_signed_zero_constants_are_distinct_terms():
    from samebits.analysis.kernel_prover import terms as T

    neg, pos = T.fconst(-0.0, "fp32"), T.fconst(0.0, "fp32")  # -0.0 first: it must not win
    assert neg is not pos
    assert T.fconst(0.0, "fp32") is pos and T.fconst(-0.0, "fp32") is neg
    assert str(pos.args[0]) == "0.0" and str(neg.args[0]) == "-0.0"
    assert T.cast(neg, "bf16") is not T.cast(pos, "bf16")
