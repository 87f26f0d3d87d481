"""The GPU plan's MoE routing and combine on the CPU, bit for bit (`kernels.moe.route`, run
by torch elementwise ops on the GPU: every op one IEEE fp32 operation, no contraction, and
`moe_combine_kernel`, launched without fp fusion).

Softmax: ``x = l - max(l)``, ``portable_exp`` (clamp at -80, ``n = round(x * LOG2E)`` ties to
even, ``r = (x - n*LN2_HI) - n*LN2_LO``, Horner with separate mul and add, ``(poly*(r*r) +
r) + 1``, times ``2^n`` from the exponent field, +0 below -80), the sum in the fixed tree of
`fixed_tree_sum`, the division. Top-k: k exact max passes, ties to the lower id. Weights
``p[id]``, renormalized by the rank-order sum. Combine: ``((o0*w0 + o1*w1) + ...)``, cast.
"""

from __future__ import annotations

import numpy as np

from samebits.kernels.moe import EXP_FLOOR, EXP_POLY, LN2_HI, LN2_LO, LOG2E
from samebits.kernels.replay.rows import cast, widen
from samebits.kernels.replay.softexp import add_f32, div_rn, f32, mul_f32

F = np.float32


def portable_exp(x) -> np.ndarray:
    """`kernels.moe.portable_exp` (fp32 x <= 0), each torch op one IEEE operation."""
    x = f32(x)
    clamped = np.maximum(x, F(EXP_FLOOR))  # torch.clamp keeps NaN
    clamped = np.where(np.isnan(x), x, clamped)
    n = np.rint(mul_f32(clamped, F(LOG2E)))
    r = add_f32(add_f32(clamped, -mul_f32(n, F(LN2_HI))), -mul_f32(n, F(LN2_LO)))
    poly = np.full_like(r, F(EXP_POLY[0]))
    for c in EXP_POLY[1:]:
        poly = add_f32(mul_f32(poly, r), F(c))
    e_r = add_f32(add_f32(mul_f32(poly, mul_f32(r, r)), r), F(1.0))
    k = np.where(np.isfinite(n), n, 0).astype(np.int32)
    out = mul_f32(e_r, ((k + 127).astype(np.uint32) << np.uint32(23)).view(np.float32))
    return np.where(x < F(EXP_FLOOR), F(0.0), out)


def fixed_tree_sum(p: np.ndarray) -> np.ndarray:
    """`kernels.moe.fixed_tree_sum`: [n, E] -> [n, 1], upper half onto lower half."""
    width = 1 << max(0, (p.shape[1] - 1).bit_length())
    s = np.zeros((p.shape[0], width), np.float32)
    s[:, : p.shape[1]] = p
    while s.shape[1] > 1:
        half = s.shape[1] // 2
        s = add_f32(s[:, :half], s[:, half:])
    return s


def top_k_lowest_id(values: np.ndarray, k: int) -> np.ndarray:
    """`kernels.moe.top_k_lowest_id`: k exact max passes, ties to the lower id."""
    n, width = values.shape
    remaining = values.copy()
    ids = np.broadcast_to(np.arange(width), (n, width))
    chosen = []
    for _ in range(k):
        top = remaining.max(axis=1, keepdims=True)
        pick = np.where(remaining == top, ids, width).min(axis=1, keepdims=True)
        pick = np.minimum(pick, width - 1)
        chosen.append(pick)
        np.put_along_axis(remaining, pick, -np.inf, axis=1)
    return np.concatenate(chosen, axis=1).astype(np.int64)


def route(logits, top_k: int, normalize: bool) -> tuple[np.ndarray, np.ndarray]:
    """`kernels.moe.route`: (ids int64 [n, k], fp32 weights [n, k]) from fp32 logits."""
    lg = f32(logits)
    if lg.ndim != 2 or not 1 <= top_k <= lg.shape[1]:
        raise ValueError(f"replay: logits [n, E] with 1 <= top_k <= E, got {lg.shape}, {top_k}")
    x = add_f32(lg, -lg.max(axis=1, keepdims=True))
    p = portable_exp(x)
    probs = div_rn(p, fixed_tree_sum(p))
    ids = top_k_lowest_id(lg, top_k)
    w = np.take_along_axis(probs, ids, axis=1)
    if normalize:
        total = w[:, :1]
        for r in range(1, top_k):
            total = add_f32(total, w[:, r : r + 1])
        w = div_rn(w, total)
    return ids, w


def combine(outputs, weights, out_dtype: str = "bfloat16") -> np.ndarray:
    """`moe_combine_kernel`: outputs [n, k, H] (bf16 bits), weights [n, k] fp32 -> bits."""
    o, w = widen(outputs), f32(weights)
    acc = mul_f32(o[:, 0], w[:, :1])
    for r in range(1, o.shape[1]):
        acc = add_f32(acc, mul_f32(o[:, r], w[:, r : r + 1]))
    return cast(acc, out_dtype)
