"""The prover's data-dependent integers and predicates (`symbolic/words.py`): what the soft
exp uses (bit casts, float -> int conversions, shifts and adds on such integers, float
comparisons and selects on them) is modelled as uninterpreted operations, and what is not
modelled is rejected with the line and the reason, never skipped. Mutants of the launched
SiLU kernel (`_row_kernels.py`), batch-invariance goal of the tiny preset."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("z3")

from samebits.analysis.kernel_prover import specs as S  # noqa: E402
from samebits.analysis.kernel_prover.prover import prove  # noqa: E402
from samebits.analysis.kernel_prover.symbolic.source import KernelSource  # noqa: E402

KDIR = Path(__file__).resolve().parents[2] / "src" / "samebits" / "kernels" / "triton"
ROWS = (KDIR / "_row_kernels.py").read_text()
SILU = "    silu = tl.math.div_rn(g, 1.0 + softexp(-g))\n"


def _silu_batch():
    (spec,) = [s for s in S.row_specs("tiny") if s.name == "tiny.silu_mul.batch"]
    return spec


def _run(old: str, new: str):
    assert ROWS.count(old) == 1, old
    spec = _silu_batch()
    src = KernelSource.parse(ROWS.replace(old, new), "_row_kernels.py")
    return prove(src, spec.goal, spec.left, spec.right, spec.m_left)


def test_the_launched_kernel_uses_the_soft_exp_and_is_proved():
    assert "tl.exp(" not in ROWS and SILU in ROWS
    res = _run(SILU, SILU)
    assert res.ok, (res.status, res.unsupported, res.counterexample)


@pytest.mark.parametrize("old, new, reason", [
    ("    k = t.to(tl.int32, bitcast=True)", "    k = t.to(tl.int16, bitcast=True)",
     "widths differ"),
    # propagate_nan=ALL is modelled (its own operation, `router_ops.minmax_nan`): still proved
    ("tl.minimum(tl.maximum(x, -104.0), 89.0)",
     "tl.minimum(tl.maximum(x, -104.0, propagate_nan=tl.PropagateNan.ALL), 89.0)",
     None),
    ("tl.minimum(tl.maximum(x, -104.0), 89.0)",
     "tl.minimum(tl.maximum(x, -104.0, propagate_nan=tl.PropagateNan.NONE), 89.0)",
     "unknown name"),  # only PropagateNan.ALL is a modelled value
    (SILU, "    silu = tl.load(gu_ptr + g.to(tl.int32), mask=mask)\n",
     "pointer arithmetic other than ptr +/- int"),
    ("    tl.store(out_ptr + row * INNER + cols, (silu * u)",
     "    tl.store(out_ptr + row * INNER + cols, (silu * u).to(tl.int32).to(tl.float32)",
     None),
    (SILU, SILU + "    mask = mask & (g > 0.0)\n", "combined with a non-predicate"),
    (SILU, SILU + "    if g > 0.0:\n        silu = g\n", "if on a tile"),
    ("    k1 = k >> 1\n", "    k1 = k.to(tl.float16, fp_downcast_rounding='rtz')\n",
     "only bitcast"),
])  # fmt: skip
def test_unmodelled_uses_are_rejected_with_the_reason(old, new, reason):
    res = _run(old, new)
    if reason is None:  # a value conversion float -> int -> float: modelled, still proved
        assert res.ok, (res.status, res.unsupported)
        return
    assert res.status == "rejected-unsupported", (res.status, res.counterexample)
    assert reason in res.unsupported and "_row_kernels.py:" in res.unsupported


def test_a_store_of_a_data_dependent_integer_is_rejected():
    res = _run(
        "    tl.store(out_ptr + row * INNER + cols, (silu * u).to(out_ptr.dtype.element_ty), "
        "mask=mask)",
        "    tl.store(out_ptr + row * INNER + cols, (silu * u).to(tl.int32), mask=mask)",
    )
    assert res.status == "rejected-unsupported" and "data-dependent word" in res.unsupported


@pytest.mark.parametrize("identity", [
    "g.to(tl.int32, bitcast=True).to(tl.float32, bitcast=True)",  # a bit cast round trip
    "tl.where(g != g, g, g)",  # a select whose branches are equal
    "tl.maximum(g, g)",
    "tl.maximum(g, g, propagate_nan=tl.PropagateNan.ALL)",
])  # fmt: skip
def test_no_identity_between_different_operations_is_assumed(identity):
    """Each expression equals g bit for bit, but is another operation: chosen by the batch
    size, the prover refuses the kernel (sound, not complete)."""
    res = _run(SILU, f"    g = tl.where(tl.num_programs(0) > 1, g, {identity})\n" + SILU)
    assert res.status == "refuted", (res.status, res.unsupported)


def test_nan_propagating_maximum_is_not_the_plain_one():
    """``tl.maximum(.., propagate_nan=ALL)`` chosen by the batch size instead of the plain
    maximum: two operations (``max_nan`` vs ``max``), refuted."""
    old = "tl.minimum(tl.maximum(x, -104.0), 89.0)"
    new = (
        "tl.minimum(tl.where(tl.num_programs(0) > 1, tl.maximum(x, -104.0), "
        "tl.maximum(x, -104.0, propagate_nan=tl.PropagateNan.ALL)), 89.0)"
    )
    res = _run(old, new)
    assert res.status == "refuted", (res.status, res.unsupported)


def test_operand_order_of_a_float_comparison_is_part_of_the_operation():
    res = _run(
        "    return tl.where(x != x, x, y)",
        "    return tl.where(tl.where(tl.num_programs(0) > 1, x != y, y != x), x, y)",
    )
    assert res.status == "refuted", (res.status, res.unsupported)


def test_the_soft_exp2_is_modelled():
    """`_softexp2.softexp2` (not launched yet) inside the SiLU kernel: within the modelled
    subset, so the attention kernel can adopt it without new front-end constructs."""
    soft2 = (KDIR / "_softexp2.py").read_text()
    helpers = soft2[soft2.index("@triton.jit") :]
    text = ROWS.replace(SILU, "    silu = tl.math.div_rn(g, 1.0 + softexp2(-g))\n")
    spec = _silu_batch()
    src = KernelSource.parse(text + "\n\n" + helpers, "_row_kernels.py")
    res = prove(src, spec.goal, spec.left, spec.right, spec.m_left)
    assert "softexp2(-g)" in text and res.ok, (res.status, res.unsupported, res.counterexample)
