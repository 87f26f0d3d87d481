"""Triton kernel of the grouped MoE expert linear: one launch over all experts of a layer.

Rows are (token, rank) pairs sorted by expert (stable). Program (t, n-tile) reads tile t's
entry of a tile table made on the device (`moe.grouped_tables`): its expert e and its rows
``[lo, hi)`` of the sorted order (``hi - lo <= BLOCK_M``, one expert per tile); a program
whose tile is past the tiles the routing needed (``lo >= hi``) exits. Row i gathers input row
``x_rows[i]`` and writes output row ``y_rows[i]``.

Invariant: the value written for row i and column c is, bit for bit, that of the split-plan
linear (`_linear_kernels.py`) of expert e's weight ``w[e]`` [N, K] on input row ``x_rows[i]``:
``((c_0 + c_1) + ...) + c_{S-1}``, each ``c_s`` a fresh fp32 ``tl.dot`` chain over range s in
k order with ``BLOCK_K`` steps, masked at ``min(K, k_lo + RANGE_K)`` exactly as
``_range_chain`` masks it, then the cast. Rows past ``hi`` load zeros and are never stored.
No value depends on another row, on the number of rows of the expert or on the tile table
beyond the row's own entry; no atomics, every output row written by one program.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _grouped_chain(x_ptr, w_ptr, xr, live, rn, N, K, k_lo, RANGE_K: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   BLOCK_K: tl.constexpr):  # fmt: skip
    """Fresh fp32 chain over k in [k_lo, min(K, k_lo + RANGE_K)) of the gathered rows ``xr``
    (only ``live`` ones loaded), BLOCK_K per tl.dot, in k order (the plan's range chain)."""
    rk = tl.arange(0, BLOCK_K)
    k_hi = tl.minimum(K, k_lo + RANGE_K)
    x_rows = x_ptr + xr.to(tl.int64)[:, None] * K
    w_cols = w_ptr + rn.to(tl.int64)[None, :] * K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, RANGE_K, BLOCK_K):
        kk = k_lo + k0 + rk
        a = tl.load(x_rows + kk[None, :], mask=live[:, None] & (kk[None, :] < k_hi), other=0.0)
        b = tl.load(w_cols + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < k_hi), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    return acc


@triton.jit
def moe_grouped_kernel(x_ptr, w_ptr, y_ptr, x_rows_ptr, y_rows_ptr, tile_expert_ptr,
                       tile_lo_ptr, tile_hi_ptr, N, K, RANGE_K: tl.constexpr,
                       SPLITS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr):  # fmt: skip
    """Program (tile t, n-tile): rows [lo, hi) of expert e, the ranges in order, the running
    total starting as c_0 (as `linear_ranges_kernel`); ``w`` is the experts' [E, N, K]."""
    t = tl.program_id(0)
    lo = tl.load(tile_lo_ptr + t)
    hi = tl.load(tile_hi_ptr + t)
    if lo >= hi:  # a tile the routing did not need (the grid is sized for the worst case)
        return
    e = tl.load(tile_expert_ptr + t)
    i = lo + tl.arange(0, BLOCK_M)
    live = i < hi
    xr = tl.load(x_rows_ptr + i, mask=live, other=0)
    w_e = w_ptr + e.to(tl.int64) * N * K
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = _grouped_chain(x_ptr, w_e, xr, live, rn, N, K, 0, RANGE_K, BLOCK_M, BLOCK_N,
                           BLOCK_K)  # fmt: skip
    for s in tl.static_range(1, SPLITS):
        total = total + _grouped_chain(x_ptr, w_e, xr, live, rn, N, K, s * RANGE_K, RANGE_K,
                                       BLOCK_M, BLOCK_N, BLOCK_K)  # fmt: skip
    yr = tl.load(y_rows_ptr + i, mask=live, other=0)
    offs = yr.to(tl.int64)[:, None] * N + rn[None, :]
    tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=live[:, None] & (rn[None, :] < N))


@triton.jit
def moe_combine_kernel(o_ptr, w_ptr, y_ptr, H, TOP_K: tl.constexpr, BLOCK: tl.constexpr):
    """Program (token t, column block): ``y[t] = ((o[t, 0] * w[t, 0] + o[t, 1] * w[t, 1]) +
    ...) + o[t, k-1] * w[t, k-1]`` in fp32, in top-k rank order, each product and sum rounded
    on its own (launched without fp fusion: no FMA), then the cast: the bits of
    `kernels.moe.combine`. o [n, k, H] (activation dtype), w [n, k] fp32, y [n, H]."""
    t = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = c < H
    acc = tl.load(o_ptr + t * TOP_K * H + c, mask=live, other=0.0).to(tl.float32) * tl.load(
        w_ptr + t * TOP_K
    )
    for r in tl.static_range(1, TOP_K):
        o = tl.load(o_ptr + (t * TOP_K + r) * H + c, mask=live, other=0.0).to(tl.float32)
        acc = acc + o * tl.load(w_ptr + t * TOP_K + r)
    tl.store(y_ptr + t * H + c, acc.to(y_ptr.dtype.element_ty), mask=live)
