"""Triton kernel of the grouped MoE launch's tile table: one program, integer arithmetic only.

It computes what `moe_grouped.tile_table_torch` computes from the routing (the same integers:
tested), in one launch instead of some thirty small torch kernels per MoE layer: per expert
its row count (a sum of the one-hot routing), its first sorted row (an exclusive prefix sum),
each pair's sorted position (its expert's first row plus the number of earlier pairs of that
expert: stable), and per tile its expert and rows ``[lo, hi)`` (``lo = hi = 0`` for a tile the
routing does not need). Integer sums and prefix sums are exact in any order, so no layout or
reduction order can change a value; every output element is stored by one lane (the sorted
positions are distinct), no atomics.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _one_hot(ids_ptr, p0, P, BLOCK_P: tl.constexpr, BLOCK_E: tl.constexpr):
    """Rows p0 .. p0 + BLOCK_P of the [P, E] one-hot routing (int32; rows past P are 0)."""
    p = p0 + tl.arange(0, BLOCK_P)
    ids = tl.load(ids_ptr + p, mask=p < P, other=-1).to(tl.int32)
    return p, (ids[:, None] == tl.arange(0, BLOCK_E)[None, :]).to(tl.int32)


@triton.jit(do_not_specialize=["P", "T"])  # one binary for every step's number of pairs
def moe_tile_table_kernel(ids_ptr, order_ptr, tokens_ptr, expert_ptr, lo_ptr, hi_ptr, P, E,
                          T, TOP_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_P: tl.constexpr,
                          BLOCK_E: tl.constexpr, BLOCK_T: tl.constexpr):  # fmt: skip
    """One program: ids [P] (expert of pair p = token * TOP_K + rank) -> order [P] (pair at
    each sorted position), tokens [P] (its token), and the T tiles' expert / lo / hi."""
    experts = tl.arange(0, BLOCK_E)
    counts = tl.zeros((BLOCK_E,), dtype=tl.int32)
    for p0 in range(0, P, BLOCK_P):
        _, hit = _one_hot(ids_ptr, p0, P, BLOCK_P, BLOCK_E)
        counts += tl.sum(hit, axis=0)
    starts = tl.cumsum(counts, 0) - counts
    running = starts
    for p0 in range(0, P, BLOCK_P):
        p, hit = _one_hot(ids_ptr, p0, P, BLOCK_P, BLOCK_E)
        rank = running[None, :] + tl.cumsum(hit, 0) - hit
        pos = tl.sum(hit * rank, axis=1)
        tl.store(order_ptr + pos, p, mask=p < P)
        tl.store(tokens_ptr + pos, p // TOP_K, mask=p < P)
        running += tl.sum(hit, axis=0)
    tiles = tl.where(experts < E, (counts + BLOCK_M - 1) // BLOCK_M, 0)
    tile_end = tl.cumsum(tiles, 0)
    for t0 in range(0, T, BLOCK_T):
        t = t0 + tl.arange(0, BLOCK_T)
        e = tl.sum((tile_end[None, :] <= t[:, None]).to(tl.int32), axis=1)
        sel = (experts[None, :] == e[:, None]).to(tl.int32)
        first = tl.sum(sel * starts[None, :], axis=1)
        tile0 = tl.sum(sel * (tile_end - tiles)[None, :], axis=1)
        end = tl.sum(sel * (starts + counts)[None, :], axis=1)
        lo = first + (t - tile0) * BLOCK_M
        hi = tl.minimum(lo + BLOCK_M, end)
        live = e < E
        tl.store(expert_ptr + t, tl.minimum(e, E - 1), mask=t < T)
        tl.store(lo_ptr + t, tl.where(live, lo, 0), mask=t < T)
        tl.store(hi_ptr + t, tl.where(live, hi, 0), mask=t < T)
