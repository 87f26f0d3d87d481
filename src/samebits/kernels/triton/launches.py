"""Launch choice for a split-plan linear: picked from M, among launches with equal numerics.

Invariant: a :class:`Launch` only decides *how* the plan's reduction is scheduled (tile sizes,
warps, pipeline stages, split-K grid vs in-program ranges). ``block_k``, the ranges and their
summation order come from the :class:`SplitPlan`, so every launch gives every row the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass

from samebits.kernels.triton.splitplan import SplitPlan

SPLIT_GRID = "split_grid"
RANGES = "ranges"
LAUNCH_KINDS = (SPLIT_GRID, RANGES)

# (max M, block_m, block_n, num_warps, num_stages); the first row whose max M >= m is used.
LAUNCH_TABLE: tuple[tuple[int, int, int, int, int], ...] = (
    (16, 16, 32, 4, 4),
    (64, 32, 64, 4, 4),
    (256, 64, 128, 4, 4),
    (1024, 128, 128, 8, 3),
    (1 << 62, 128, 256, 8, 3),
)
# Split plans (S > 1) take the split-K grid at every M: each program runs one fp32 chain (one
# accumulator tile, as fast as the S = 1 kernel) and an ordered-sum kernel adds the S partials.
# The in-program launch, which holds the running total and the range chain in registers at
# once, computes the same bits but ran 3.3-4.5x cuBLAS at M >= 128 on o / down (Llama-3-8B
# shapes, `benchmarks/gpu_ops.py` on the H200, 2026-11-30), against 1.0-1.1x for the grid at
# M <= 32; the partials cost S * M * N * 8 bytes of traffic instead.


@dataclass(frozen=True)
class Launch:
    """How one call is scheduled; never changes the numbers (see module docstring)."""

    kind: str
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int

    def __post_init__(self) -> None:
        if self.kind not in LAUNCH_KINDS:
            raise ValueError(f"launch kind must be one of {LAUNCH_KINDS}, got {self.kind!r}")
        if self.block_m < 16 or self.block_n < 16:
            raise ValueError("tl.dot needs block_m and block_n >= 16")


def choose_launch(
    plan: SplitPlan,
    m: int,
    table: tuple[tuple[int, int, int, int, int], ...] = LAUNCH_TABLE,
) -> Launch:
    """The launch for ``m`` rows: the split-K grid when the plan splits, else one program per
    output tile; tile sizes from ``table`` by M."""
    if m < 1:
        raise ValueError(f"a linear needs at least one row, got m={m}")
    kind = SPLIT_GRID if plan.splits > 1 else RANGES
    _, block_m, block_n, warps, stages = next(row for row in table if m <= row[0])
    return Launch(kind, block_m, block_n, warps, stages)
