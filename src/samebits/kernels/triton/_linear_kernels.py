"""Triton kernels of the split-plan linear (y = x @ w.T, w [N, K] row-major).

Invariant: every output element is ``((c_0 + c_1) + ...) + c_{S-1}`` (then ``+ bias``, then the
cast), each ``c_s`` a fresh fp32 ``tl.dot`` chain over range s in k order with ``BLOCK_K`` steps.
Rows past M load zeros and are never stored; M is a runtime argument excluded from
specialization, so one binary serves every batch size. The TMA kernel reads the same elements
through tensor descriptors, whose out-of-bounds rows and columns read as zeros (what the masked
pointer loads give), and walks the same chains in one k loop.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, k_lo, RANGE_K: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """Fresh fp32 chain over k in [k_lo, min(K, k_lo + RANGE_K)), BLOCK_K per tl.dot, k order.

    The trip count is the static RANGE_K / BLOCK_K; a plan's ranges end at K (or within one
    step of it when S == 1), so no launch ever runs a fully masked step.
    """
    rk = tl.arange(0, BLOCK_K)
    k_hi = tl.minimum(K, k_lo + RANGE_K)
    x_rows = x_ptr + rm.to(tl.int64)[:, None] * K
    w_cols = w_ptr + rn.to(tl.int64)[None, :] * K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, RANGE_K, BLOCK_K):
        kk = k_lo + k0 + rk
        a = tl.load(x_rows + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < k_hi), other=0.0)
        b = tl.load(w_cols + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < k_hi), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
    return acc


@triton.jit
def _store_output(total, b_ptr, y_ptr, rm, rn, M, N, HAS_BIAS: tl.constexpr):
    """Epilogue shared by both launches: ``+ bias`` (fp32), cast, masked store."""
    if HAS_BIAS:
        total = total + tl.load(b_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)[None, :]
    offs = rm.to(tl.int64)[:, None] * N + rn[None, :]
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M"])
def linear_ranges_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K, RANGE_K: tl.constexpr,
                         SPLITS: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """Program (m-tile, n-tile): the ranges in order, the running total starting as c_0."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    total = _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, 0, RANGE_K, BLOCK_M, BLOCK_N, BLOCK_K)
    for s in tl.static_range(1, SPLITS):
        total = total + _range_chain(x_ptr, w_ptr, rm, rn, M, N, K, s * RANGE_K, RANGE_K,
                                     BLOCK_M, BLOCK_N, BLOCK_K)  # fmt: skip
    _store_output(total, b_ptr, y_ptr, rm, rn, M, N, HAS_BIAS)


@triton.jit(do_not_specialize=["M"])
def linear_partials_kernel(x_ptr, w_ptr, p_ptr, M, N, K, RANGE_K: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                           BLOCK_K: tl.constexpr):  # fmt: skip
    """Program (m-tile, n-tile, range s): chain c_s into fp32 partials [S, M, N]."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    s = tl.program_id(2)
    acc = _range_chain(
        x_ptr, w_ptr, rm, rn, M, N, K, s * RANGE_K, RANGE_K, BLOCK_M, BLOCK_N, BLOCK_K
    )
    offs = (s * M + rm).to(tl.int64)[:, None] * N + rn[None, :]
    tl.store(p_ptr + offs, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit(do_not_specialize=["M"])
def ordered_sum_kernel(p_ptr, b_ptr, y_ptr, M, N, SPLITS: tl.constexpr, HAS_BIAS: tl.constexpr,
                       BLOCK: tl.constexpr):  # fmt: skip
    """Elementwise: partial 0, then + partials 1..S-1 in order, + bias, cast."""
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mn = M.to(tl.int64) * N
    mask = i < mn
    total = tl.load(p_ptr + i, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLITS):
        total = total + tl.load(p_ptr + s * mn + i, mask=mask, other=0.0)
    if HAS_BIAS:
        total = total + tl.load(b_ptr + i % N, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + i, total.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit(do_not_specialize=["M"])
def linear_tma_kernel(x_desc, w_desc, b_ptr, y_ptr, M, N, K, RANGE_K: tl.constexpr,
                      SPLITS: tl.constexpr, HAS_BIAS: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      GROUP_N: tl.constexpr):  # fmt: skip
    """Program (n-tile in group, m-tile, n-group): grid order walks GROUP_N weight tiles across
    every m-tile before the next group (L2 reuse). One k loop of SPLITS * RANGE_K / BLOCK_K
    steps; at the last step of range s the chain c_s becomes the total (s = 0) or is added to
    it, and a fresh chain starts: the same ``((c_0 + c_1) + ...)`` as the other launches."""
    off_m = tl.program_id(1) * BLOCK_M
    off_n = (tl.program_id(2) * GROUP_N + tl.program_id(0)) * BLOCK_N
    STEPS: tl.constexpr = RANGE_K // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if SPLITS == 1:
        for i in range(0, STEPS):
            a = x_desc.load([off_m, i * BLOCK_K])
            b = w_desc.load([off_n, i * BLOCK_K])
            acc = tl.dot(a, b.T, acc, input_precision="ieee")
        total = acc
    else:
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for i in range(0, SPLITS * STEPS):
            a = x_desc.load([off_m, i * BLOCK_K])
            b = w_desc.load([off_n, i * BLOCK_K])
            acc = tl.dot(a, b.T, acc, input_precision="ieee")
            if i % STEPS == STEPS - 1:  # a select, not a branch: nested ifs ran 1.5x slower
                total = tl.where(i < STEPS, acc, total + acc)
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    rm = off_m + tl.arange(0, BLOCK_M)
    rn = off_n + tl.arange(0, BLOCK_N)
    _store_output(total, b_ptr, y_ptr, rm, rn, M, N, HAS_BIAS)
