"""The split plan of one weight: the reduction structure every launch must reproduce.

Invariant: a plan is a pure function of ``(n, k, role)``. It never sees the number of rows M,
so every row of every batch is reduced in the same order: K is cut into ``splits`` fixed ranges
``[s*range_k, (s+1)*range_k)`` (masked at K), each range is a fresh fp32 chain of ``block_k``-wide
``tl.dot`` steps in k order, and the ranges are added in order ``((c_0 + c_1) + c_2) + ...``.
"""

from __future__ import annotations

from dataclasses import dataclass

ROLES = ("qkv", "o", "gate_up", "down", "lm_head", "router")
ROW_PARALLEL_ROLES = ("o", "down")

# The one table of split candidates (largest first). Row-parallel weights (o, down) split so
# that a tensor-parallel degree dividing S (1, 2 or 4) reproduces the bits; S = 4 rather than 8
# because it ran faster at every M on the H200 (S=4: 1.04-1.08x cuBLAS at M <= 32 and 1.70-1.82x
# at M >= 2048; S=8: 1.08-1.11x and 1.76-1.94x; ../shared/measurements/*-splitplan-scost.json).
# Column weights (qkv, gate_up, lm_head, a MoE router) need no reduction across ranks and take
# S = 1: a second fp32 accumulator costs ~1.3-1.5x at large M (same measurement).
SPLIT_CANDIDATES: dict[str, tuple[int, ...]] = {
    "row_parallel": (4, 2, 1),
    "column": (1,),
}
# Every range of a split plan holds at least this many block_k steps. Measured on the H200
# (2026-11-30): with one step per range the in-program launch gave other bits than the split-K
# grid (K=256, S=4), consistent with Triton folding `total + dot(a, b, 0)` into
# `dot(a, b, total)`; with two or more steps the chain's last dot never has a zero accumulator.
MIN_STEPS_PER_RANGE = 2
# The roles whose linear may add a bias (Qwen2's qkv; `certified.units.has_bias`). Their
# ranges hold MIN_STEPS_PER_RANGE steps even when S = 1 (a smaller block_k for small K):
# measured on the H200 (2026-12-03, benchmarks/replay_k64_probe.py), a range of one
# `tl.dot(a, b, 0)` followed by `+ bias` is compiled as `tl.dot(a, b, bias)` (the bias as the
# MMA accumulator: other bits than chain-then-add; qkv 128x64 with bias, 8 of 12 input classes,
# every launch alike); with two steps per range every launch adds the bias after the chain.
BIAS_ROLES = ("qkv",)


@dataclass(frozen=True)
class SplitPlan:
    """Numerics of one weight [n, k]: ``splits`` ranges of ``range_k`` columns, ``block_k`` steps."""

    n: int
    k: int
    splits: int
    block_k: int
    range_k: int

    def ranges(self) -> list[tuple[int, int]]:
        """The K ranges ``[lo, hi)`` in summation order (``hi`` clipped at k)."""
        return [(s * self.range_k, min(self.k, (s + 1) * self.range_k)) for s in range(self.splits)]


def plan_block_k(k: int) -> int:
    """The k step of every dot in the plan: 64, or 32 for tiny k (tl.dot needs >= 16)."""
    return 64 if k >= 64 else 32


def _bias_block_k(k: int, block_k: int) -> int:
    """The largest block_k <= ``block_k`` (64, 32, 16) giving a single range of ``k`` at least
    MIN_STEPS_PER_RANGE steps; a K of one MMA step (16) cannot carry a bias."""
    while block_k > 16 and -(-k // block_k) < MIN_STEPS_PER_RANGE:
        block_k //= 2
    if -(-k // block_k) < MIN_STEPS_PER_RANGE:
        raise ValueError(f"a linear of role in {BIAS_ROLES} needs K > 16 (got K={k}): one MMA "
                         "step would take its bias as the accumulator")  # fmt: skip
    return block_k


def _candidates(role: str) -> tuple[int, ...]:
    return SPLIT_CANDIDATES["row_parallel" if role in ROW_PARALLEL_ROLES else "column"]


def split_plan(n: int, k: int, role: str) -> SplitPlan:
    """The plan of weight [n, k] with ``role``: the largest candidate S with
    k % (S * block_k) == 0 and at least MIN_STEPS_PER_RANGE steps per range (else S = 1).

    ``range_k`` is ``ceil(k / S)`` rounded up to a multiple of ``block_k``; columns past k
    are masked, so a range may be shorter than ``range_k``.
    """
    if role not in ROLES:
        raise ValueError(f"unknown linear role {role!r}; expected one of {ROLES}")
    if n < 1 or k < 1:
        raise ValueError(f"weight shape must be positive, got n={n}, k={k}")
    block_k = plan_block_k(k)
    if role in BIAS_ROLES:
        block_k = _bias_block_k(k, block_k)
    splits = next(
        s for s in _candidates(role)
        if s == 1 or (k % (s * block_k) == 0 and k // s >= MIN_STEPS_PER_RANGE * block_k)
    )  # fmt: skip
    per_range = -(-k // splits)
    range_k = -(-per_range // block_k) * block_k
    return SplitPlan(n=n, k=k, splits=splits, block_k=block_k, range_k=range_k)
