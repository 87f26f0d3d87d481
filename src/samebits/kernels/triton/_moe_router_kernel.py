"""Triton kernel of the MoE router: softmax, top-k and renormalization of one layer's router
logits in one launch (in place of about a hundred small torch kernels per MoE layer).

It computes, op for op, `samebits.kernels.moe.route` (the definition, in that module's
docstring): ``m = max(l)``; ``x = l - m``; ``p = portable_exp(x)`` (clamp at -80 with NaN kept,
``n`` = ``x * LOG2E`` rounded to the nearest integer, ties to even, Cody-Waite in two rounded
steps, the fixed Horner polynomial, ``2^n`` from the exponent field, +0.0 below -80); ``s`` the
fixed binary tree sum of p padded with +0.0 to a power of two (upper half onto lower half);
``p / s`` (IEEE division); k passes of an exact max over the remaining logits and the lowest id
among the equal ones; ``w_r = p[id_r]``, renormalized by ``((w_0 + w_1) + ...)`` in rank order.
Every float operation is one IEEE fp32 operation rounded to nearest even: the launch must pass
``enable_fp_fusion=False`` (no FMA contraction), divisions are ``div_rn``, and the maxima
propagate NaN as torch's ``amax`` / ``clamp`` do. Nothing depends on another row: one program
per BLOCK_T rows, no atomics, each output element stored by one lane.
Evidence class: test (`tests/kernels/triton/test_triton_moe_router.py` against
`kernels.moe.route`, interpreter; `tests/gpu/test_gpu_moe.py` on the H200).
"""

from __future__ import annotations

import triton
import triton.language as tl

# the constants of `kernels.moe.portable_exp` (fp32 literals here, as torch rounds them)
EXP_FLOOR = tl.constexpr(-80.0)
ROUND_SHIFT = tl.constexpr(12582912.0)  # 1.5 * 2^23: (y + S) - S rounds y to an integer, ties even


@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _row_max(x):
    """Row maxima of x [T, E] (exact; NaN if the row has one, as ``torch.amax``)."""
    return tl.reduce(x, 1, _max_nan, keep_dims=True)


@triton.jit
def _portable_exp(x):
    """`kernels.moe.portable_exp`, elementwise, one rounding per operation."""
    c = _max_nan(x, EXP_FLOOR)
    n = (c * 1.44269504088896341 + ROUND_SHIFT) - ROUND_SHIFT
    r = (c - n * 0.693359375) - n * -2.12194440e-4
    poly = tl.full(r.shape, 1.9875691500e-4, tl.float32) * r + 1.3981999507e-3
    poly = poly * r + 8.3334519073e-3
    poly = poly * r + 4.1665795894e-2
    poly = poly * r + 1.6666665459e-1
    poly = poly * r + 5.0000001201e-1
    e_r = (poly * (r * r) + r) + 1.0
    scale = ((n.to(tl.int32) + 127) << 23).to(tl.float32, bitcast=True)
    return tl.where(x < EXP_FLOOR, 0.0, e_r * scale)


@triton.jit
def _tree_sum(p, BLOCK_T: tl.constexpr, LOG_WIDTH: tl.constexpr):
    """Row sums [T, 1] of p [T, 2^LOG_WIDTH]: ``s[j] + s[j + W/2]`` halving, each level one
    rounded add per pair (a sum over an axis of length 2 is that one add)."""
    s = p
    for i in tl.static_range(LOG_WIDTH):
        s = tl.sum(tl.reshape(s, (BLOCK_T, 2, (1 << LOG_WIDTH) >> (i + 1))), axis=1)
    return s


@triton.jit
def _pick(remaining, lane, E: tl.constexpr, BLOCK_E: tl.constexpr):
    """The lowest lane among the row maxima of ``remaining`` [T, BLOCK_E]; a NaN row: E - 1."""
    top = _row_max(remaining)
    pick = tl.min(tl.where(remaining == top, lane, BLOCK_E), axis=1, keep_dims=True)
    return tl.minimum(pick, E - 1)


@triton.jit(do_not_specialize=["n"])
def moe_router_kernel(logits_ptr, ids_ptr, w_ptr, n, E: tl.constexpr, TOP_K: tl.constexpr,
                      NORMALIZE: tl.constexpr, BLOCK_T: tl.constexpr, LOG_E: tl.constexpr,
                      BLOCK_K: tl.constexpr):  # fmt: skip
    """logits [n, E] fp32 -> ids [n, TOP_K] int64, weights [n, TOP_K] fp32, rows
    ``pid * BLOCK_T ...``; 2^LOG_E = next_pow2(E) (the tree's width), BLOCK_K >= TOP_K."""
    BLOCK_E: tl.constexpr = 1 << LOG_E
    rows = tl.program_id(0) * BLOCK_T + tl.arange(0, BLOCK_T)[:, None]
    lane = tl.arange(0, BLOCK_E)[None, :]
    rank = tl.arange(0, BLOCK_K)[None, :]
    logits = tl.load(logits_ptr + rows.to(tl.int64) * E + lane, mask=(rows < n) & (lane < E),
                     other=float("-inf"))  # fmt: skip
    p = tl.where(lane < E, _portable_exp(logits - _row_max(logits)), 0.0)
    probs = tl.math.div_rn(p, _tree_sum(p, BLOCK_T, LOG_E))
    remaining = logits
    ids = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.int32)
    weights = tl.zeros((BLOCK_T, BLOCK_K), dtype=tl.float32)
    total = tl.zeros((BLOCK_T, 1), dtype=tl.float32)
    for r in tl.static_range(TOP_K):
        pick = _pick(remaining, lane, E, BLOCK_E)
        w = _row_max(tl.where(lane == pick, probs, float("-inf")))
        total = w if r == 0 else total + w  # r is a constexpr: w_0, then rank order
        ids = tl.where(rank == r, pick, ids)
        weights = tl.where(rank == r, w, weights)
        remaining = tl.where(lane == pick, float("-inf"), remaining)
    if NORMALIZE:
        weights = tl.math.div_rn(weights, total)
    out = rows.to(tl.int64) * TOP_K + rank
    live = (rows < n) & (rank < TOP_K)
    tl.store(ids_ptr + out, ids.to(tl.int64), mask=live)
    tl.store(w_ptr + out, weights, mask=live)
