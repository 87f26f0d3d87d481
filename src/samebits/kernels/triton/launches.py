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
TMA = "tma"
LAUNCH_KINDS = (SPLIT_GRID, RANGES, TMA)

# Rows (max M, kind, block_m, block_n, num_warps, num_stages, group_n); the first row whose max M
# >= m is used. Measured on the H200 (`benchmarks/linear_sweep.py`, CUDA-graph timing with a cold
# L2, Llama-3-8B shapes; `benchmarks/results/2026-11-30-h200-linear-sweep*.json` and, for
# 16 < M <= 256, `...-2026-12-01-h200-linear-sweep-decode.json`), then in the engine
# (`benchmarks/gpu_step_breakdown.py`, `...-2026-12-01-h200-step-breakdown-*.json`):
# - column weights (S = 1): pointer loads at M <= 16; at 16 < M <= 64 TMA descriptor loads with
#   one 64-row m-tile (the weight read once) and narrow tiles for more programs: qkv 64x32 /
#   8 stages 21.1 us (was 24.8 with 64x64 pointer tiles, cuBLAS 20.0), gate_up 64x128 66.9 us
#   (was 71.3, cuBLAS 68.8); above, TMA in grouped tile order (qkv / gate_up 1.01-1.04x cuBLAS
#   at M >= 2048, where the pointer kernel ran 1.20-1.35x). Narrow weights (N < WIDE_N, e.g.
#   qkv) keep 64x64 tiles at 64 < M <= 256 (128x128 tiles leave most SMs idle: qkv M=128: 24
#   vs 33 us).
# - split plans (S > 1): the split-K grid at M <= 128 (64x64 tiles at 16 < M <= 64: o 16.7 us,
#   down 42.5, were 17.7 / 46.5 with 32x64); above, the TMA kernel with the ranges in one k loop
#   (o 1.18-1.25x, down 1.09-1.18x cuBLAS at M >= 512), where the grid's partials
#   (S*M*N*8 bytes) cost 1.5-2.1x and in-program ranges as nested loops 2.5x.
# - Not taken at 128 < M <= 256: tiles of 128x64 ran o / down / qkv 18-20% faster alone, but
#   one wave of them shares SMs with the device SHA-256's long-running programs: a batch-256
#   engine step took 15.8 ms with them and digests, 14.7 ms with the 128x128 tiles (without
#   digests 14.5 vs 14.6 ms).
COLUMN_TABLE: tuple[tuple, ...] = (
    (16, RANGES, 16, 32, 4, 6, 1),
    (64, TMA, 64, 128, 4, 4, 8),
    (256, TMA, 128, 128, 8, 4, 8),
    (1 << 62, TMA, 128, 256, 8, 4, 8),
)
NARROW_ROWS = {  # replace the rows of these max M when N < WIDE_N
    64: (64, TMA, 64, 32, 4, 8, 8),
    256: (256, TMA, 64, 64, 4, 6, 1),
}
WIDE_N = 16384
# the Ms whose launches the fingerprint lists per weight (`backend.linear_specializations`)
# and the certification units cover (`certified.units.m_probes`, with each table row's max M)
M_PROBES = (1, 2, 8, 16, 32, 64, 65, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
SPLIT_TABLE: tuple[tuple, ...] = (
    (16, SPLIT_GRID, 16, 32, 4, 4, 1),
    (64, SPLIT_GRID, 64, 64, 4, 4, 1),
    (128, SPLIT_GRID, 64, 128, 4, 4, 1),
    (1 << 62, TMA, 128, 128, 8, 4, 8),
)
# Without TMA (compute capability < 9, or K * itemsize not a multiple of 16), a TMA row runs
# the same tiles as the pointer kernel of the plan (ranges for S = 1, split grid for S > 1);
# the prover certifies every launch of both tables in both forms (equal bits).


@dataclass(frozen=True)
class Launch:
    """How one call is scheduled; never changes the numbers (see module docstring)."""

    kind: str
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    group_n: int = 1

    def __post_init__(self) -> None:
        if self.kind not in LAUNCH_KINDS:
            raise ValueError(f"launch kind must be one of {LAUNCH_KINDS}, got {self.kind!r}")
        if self.block_m < 16 or self.block_n < 16:
            raise ValueError("tl.dot needs block_m and block_n >= 16")
        if self.group_n < 1:
            raise ValueError(f"group_n must be >= 1, got {self.group_n}")


def launch_table(plan: SplitPlan) -> tuple[tuple, ...]:
    """The table rows for ``plan`` (a function of the plan's N and S only)."""
    if plan.splits > 1:
        return SPLIT_TABLE
    if plan.n < WIDE_N:
        return tuple(NARROW_ROWS.get(row[0], row) for row in COLUMN_TABLE)
    return COLUMN_TABLE


def pointer_kind(plan: SplitPlan) -> str:
    """The pointer-load launch kind that stands in for TMA (same tiles, same bits)."""
    return SPLIT_GRID if plan.splits > 1 else RANGES


def table_launches(plan: SplitPlan) -> list[Launch]:
    """Every row of the plan's table as its launch, then the same tiles in the pointer kind
    (what a bitwise check of every launch runs; duplicates dropped, order kept)."""
    rows = launch_table(plan)
    out = [Launch(r[1], r[2], r[3], r[4], r[5], r[6]) for r in rows]
    out += [Launch(pointer_kind(plan), r[2], r[3], r[4], r[5], 1) for r in rows]
    return list(dict.fromkeys(out))


def choose_launch(plan: SplitPlan, m: int, tma: bool = True) -> Launch:
    """The launch for ``m`` rows from :func:`launch_table`; with ``tma=False`` a TMA row runs
    as :func:`pointer_kind` with the same tiles."""
    if m < 1:
        raise ValueError(f"a linear needs at least one row, got m={m}")
    _, kind, block_m, block_n, warps, stages, group = next(
        row for row in launch_table(plan) if m <= row[0]
    )
    if kind == TMA and not tma:
        kind, group = pointer_kind(plan), 1
    return Launch(kind, block_m, block_n, warps, stages, group)
