"""Planted bugs in copies of the real kernels: the prover must reject every one, with a
counterexample (two executions and the element) or, for a non-deterministic construct, with
the line and the reason. The kernel text is read at test time, so the mutants follow the
kernels as they change; each mutation asserts that its anchor text still exists."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("z3")

from samebits.analysis.kernel_prover import specs as S  # noqa: E402
from samebits.analysis.kernel_prover.prover import prove  # noqa: E402
from samebits.analysis.kernel_prover.symbolic.source import KernelSource  # noqa: E402

KDIR = Path(__file__).resolve().parents[2] / "src" / "samebits" / "kernels" / "triton"
LINEAR = (KDIR / "_linear_kernels.py").read_text()
ROWS = (KDIR / "_row_kernels.py").read_text()


def mutate(text: str, old: str, new: str) -> str:
    assert text.count(old) == 1, f"mutation anchor not found exactly once: {old!r}"
    return text.replace(old, new)


def _spec(specs, name):
    by = {s.name: s for s in specs}
    assert name in by, sorted(by)
    return by[name]


def tiny_linear(role: str, kind: str, launch: str):
    return _spec(S.linear_specs("tiny", roles=(role,)), f"tiny.{role}.{kind}.{launch}")


def split_linear(kind: str, launch: str):
    """A row-parallel weight whose plan splits K (S = 4, two 64-steps per range)."""
    return _spec(S.linear_specs("tiny", shapes=[("down", 64, 512)]), f"tiny.down.{kind}.{launch}")


def run(spec, text: str, name: str):
    res = prove(KernelSource.parse(text, name), spec.goal, spec.left, spec.right, spec.m_left)
    return res


def assert_refuted(res, *needles):
    assert res.status == "refuted", (res.status, res.unsupported)
    cex = res.counterexample
    assert cex and cex.get("reason"), cex
    blob = repr(cex)
    for n in needles:
        assert n in blob, (n, cex)
    return cex


BM16 = "ranges-bm16-bn32-w4-s6"  # the first launch of a column plan (S = 1)
BM16_SPLIT = "ranges-bm16-bn32-w4-s4"  # the same tiles as the split plan's first grid launch
TMA_SPLIT = "tma-bm128-bn128-w8-s4-g8"


def test_block_k_chosen_from_m_is_refuted():
    # the k step follows M (a "faster" step for big batches) while the tile stays BLOCK_K wide
    text = mutate(
        LINEAR,
        "    for k0 in range(0, RANGE_K, BLOCK_K):",
        "    step = tl.where(M > 16, BLOCK_K // 2, BLOCK_K)\n"
        "    for k0 in range(0, RANGE_K, step):",
    )
    res = run(tiny_linear("o", "batch", BM16), text, "_linear_kernels.py")
    cex = assert_refuted(res, "y:")
    assert cex["element_and_programs"]["L.M"] > 16  # the two executions: M > 16 vs M = 1
    assert "elem.r" in cex["element_and_programs"]


def test_atomic_add_reduction_is_rejected_with_line():
    text = mutate(
        LINEAR,
        "    tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=mask)",
        "    tl.atomic_add(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=mask)",
    )
    res = run(tiny_linear("o", "batch", BM16), text, "_linear_kernels.py")
    assert res.status == "rejected-unsupported"
    line = text.splitlines().index(
        "    tl.atomic_add(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=mask)"
    )
    assert f"_linear_kernels.py:{line + 1}" in res.unsupported
    assert "non-deterministic" in res.unsupported


def _reversed_in_odd_tiles() -> str:
    text = mutate(
        LINEAR,
        "    total = _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, 0, RANGE_K, BLOCK_M, BLOCK_N, "
        "BLOCK_K)",
        "    rev = tl.program_id(0) % 2\n"
        "    total = _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, rev * (SPLITS - 1) * RANGE_K,"
        " RANGE_K, BLOCK_M, BLOCK_N, BLOCK_K)",
    )
    return mutate(
        text,
        "total + _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, s * RANGE_K, RANGE_K,",
        "total + _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, (s + rev * (SPLITS - 1 - 2 * s))"
        " * RANGE_K, RANGE_K,",
    )


def test_reversed_range_order_in_odd_programs_is_refuted():
    res = run(split_linear("batch", BM16_SPLIT), _reversed_in_odd_tiles(), "_linear_kernels.py")
    cex = assert_refuted(res, "y:")
    model = cex["element_and_programs"]
    assert model["elem.r"] // 16 % 2 == 1  # the row sits in an odd m-tile of the left launch


def test_reversed_order_breaks_launch_equivalence_with_the_split_grid():
    spec = split_linear("equiv", f"split_grid-bm16-bn32-w4-s4~{BM16_SPLIT}")
    res = run(spec, _reversed_in_odd_tiles(), "_linear_kernels.py")
    assert_refuted(res, "y:")


def test_row_reading_another_row_is_refuted():
    text = mutate(
        LINEAR,
        "x_rows = x_ptr + rm.to(tl.int64)[:, None] * K",
        "x_rows = x_ptr + (rm ^ 1).to(tl.int64)[:, None] * K",
    )
    res = run(tiny_linear("o", "batch", BM16), text, "_linear_kernels.py")
    assert_refuted(res, "right-outside-row")


def test_norm_row_reading_another_row_is_refuted():
    text = mutate(ROWS, "r = tl.load(x_ptr + offs,", "r = tl.load(x_ptr + (offs ^ WIDTH),")
    res = run(_spec(S.row_specs("tiny"), "tiny.rms_norm.batch"), text, "_row_kernels.py")
    assert_refuted(res, "right-outside-row", "reduce")


def test_early_exit_depending_on_m_is_refuted():
    text = mutate(
        LINEAR,
        "    total = _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, 0, RANGE_K,",
        "    if M > 64:\n        return\n"
        "    total = _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, 0, RANGE_K,",
    )
    res = run(tiny_linear("o", "batch", BM16), text, "_linear_kernels.py")
    cex = assert_refuted(res, "does not write")
    assert cex["element"]["L.M"] > 64


def test_layout_dependent_sum_is_refuted():
    # a norm whose warps follow the batch: tl.sum's tree follows the layout, so no proof
    spec = _spec(S.row_specs("tiny"), "tiny.rms_norm.batch")
    spec.right[0].num_warps = spec.left[0].num_warps * 2
    res = run(spec, ROWS, "_row_kernels.py")
    assert_refuted(res, "reduce: parameters differ")


# --- the TMA kernel (descriptor loads, one k loop, a select at each range's last step) -----

TMA_EQUIV = f"split_grid-bm16-bn32-w4-s4~{TMA_SPLIT}"


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        # the running total added on the other side (a float add is not assumed commutative)
        ("tl.where(i < STEPS, acc, total + acc)", "tl.where(i < STEPS, acc, acc + total)", "y:"),
        # the first range added to a zero total instead of becoming it
        ("tl.where(i < STEPS, acc, total + acc)", "total + acc", "y:"),
        # a weight box read at the wrong k
        ("            b = w_desc.load([off_n, i * BLOCK_K])\n            acc = tl.dot(a, b.T, acc, "
         "input_precision=\"ieee\")\n            if i % STEPS",
         "            b = w_desc.load([off_n, (i % 2) * BLOCK_K])\n            acc = tl.dot(a, b.T, "
         "acc, input_precision=\"ieee\")\n            if i % STEPS", "reads w"),
    ],
)  # fmt: skip
def test_tma_kernel_mutants_break_launch_equivalence(old, new, needle):
    res = run(split_linear("equiv", TMA_EQUIV), mutate(LINEAR, old, new), "_linear_kernels.py")
    assert_refuted(res, needle)


def test_tma_group_axes_swapped_is_refuted():
    # N = 1100: 9 weight tiles of 128 in groups of 8; the swapped axes leave tiles unwritten
    specs = S.linear_specs("tiny", shapes=[("down", 1100, 512)])
    text = mutate(LINEAR, "(tl.program_id(2) * GROUP_N + tl.program_id(0))",
                  "(tl.program_id(0) * GROUP_N + tl.program_id(2))")  # fmt: skip
    res = run(_spec(specs, f"tiny.down.equiv.{TMA_EQUIV}"), text, "_linear_kernels.py")
    assert_refuted(res)


def test_tma_box_of_another_row_is_refuted():
    text = mutate(
        LINEAR,
        "            a = x_desc.load([off_m, i * BLOCK_K])\n            b = w_desc.load([off_n, i * BLOCK_K])\n"
        "            acc = tl.dot(a, b.T, acc, input_precision=\"ieee\")\n            if i % STEPS",
        "            a = x_desc.load([off_m + 1, i * BLOCK_K])\n            b = w_desc.load([off_n, i * BLOCK_K])\n"
        "            acc = tl.dot(a, b.T, acc, input_precision=\"ieee\")\n            if i % STEPS",
    )  # fmt: skip
    res = run(split_linear("batch", TMA_SPLIT), text, "_linear_kernels.py")
    cex = assert_refuted(res, "y:")  # row r reads row r + 1 (zero fill past M when alone)
    assert cex["element_and_programs"]["L.M"] > 1
