"""Triton kernels for row-local ops: one program per row (or per row and column block).

Invariant: a program handles exactly one row with a layout fixed by the row width (block =
next_pow2(width), num_warps a function of the width), so the only reduction (``tl.sum`` of the
squares in RMSNorm) has the same tree for every row of every batch. The other ops are
elementwise. Divisions and square roots are IEEE round-to-nearest (``div_rn``/``sqrt_rn``).
No batch-dependent integer is a kernel argument (the row comes from the grid). RoPE has one
expression (``_rope_heads``) shared by the in-place kernel and the fused qkv kernel, whose K/V
writes go to the token's slot (read from the slot mapping), never to another token's.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _rms_apply(r, w_ptr, cols, mask, eps, WIDTH: tl.constexpr):
    """``(r * 1/sqrt(mean(r^2) + eps)) * w`` in fp32 for one row held in registers."""
    mean = tl.math.div_rn(tl.sum(r * r, axis=0), tl.full((), WIDTH, tl.float32))
    inv = tl.math.div_rn(tl.full((), 1.0, tl.float32), tl.math.sqrt_rn(mean + eps))
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    return (r * inv) * w


@triton.jit
def rms_norm_kernel(x_ptr, res_ptr, w_ptr, out_ptr, eps, WIDTH: tl.constexpr,
                    BLOCK: tl.constexpr, ADD_RESIDUAL: tl.constexpr):  # fmt: skip
    """Row program: [residual += x;] out = rms_norm(row). ``out_ptr`` may alias ``x_ptr``."""
    cols = tl.arange(0, BLOCK)
    mask = cols < WIDTH
    offs = tl.program_id(0).to(tl.int64) * WIDTH + cols
    r = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    if ADD_RESIDUAL:
        r = tl.load(res_ptr + offs, mask=mask, other=0.0) + r
        tl.store(res_ptr + offs, r, mask=mask)
    y = _rms_apply(r, w_ptr, cols, mask, eps, WIDTH)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _rope_angles(cos_ptr, sin_ptr, pos_ptr, tok, i, HALF: tl.constexpr):
    """cos and sin [1, BLOCK_D] (fp32) of token ``tok``'s position; lanes i >= HALF read 0."""
    pos = tl.load(pos_ptr + tok).to(tl.int64)
    c = tl.load(cos_ptr + pos * HALF + i, mask=i < HALF, other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + pos * HALF + i, mask=i < HALF, other=0.0).to(tl.float32)
    return c, s


@triton.jit
def _rope_heads(src, dst, c, s, h, i, HEADS: tl.constexpr, HALF: tl.constexpr):
    """Rotate-half RoPE of the ``HEADS`` heads (each ``2 * HALF`` wide, contiguous) at ``src``
    into ``dst``: ``(a, b) -> (a*c - b*s, b*c + a*s)`` in fp32, cast to dst's element type.
    The one RoPE expression of the plan (rope_kernel and qkv_rope_store_kernel both call it,
    so both compile the same arithmetic). Both halves are loaded before either is stored
    (``dst`` may be ``src``)."""
    mask = (h < HEADS) & (i < HALF)
    lo = h * (2 * HALF) + i
    a = tl.load(src + lo, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(src + lo + HALF, mask=mask, other=0.0).to(tl.float32)
    tl.store(dst + lo, (a * c - b * s).to(dst.dtype.element_ty), mask=mask)
    tl.store(dst + lo + HALF, (b * c + a * s).to(dst.dtype.element_ty), mask=mask)


@triton.jit
def rope_kernel(x_ptr, pos_ptr, cos_ptr, sin_ptr, HEADS: tl.constexpr, HALF: tl.constexpr,
                BLOCK_H: tl.constexpr, BLOCK_D: tl.constexpr):  # fmt: skip
    """Token program: rotate-half RoPE of all heads of one token, in place (fp32 math)."""
    tok = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK_H)[:, None]
    i = tl.arange(0, BLOCK_D)[None, :]
    c, s = _rope_angles(cos_ptr, sin_ptr, pos_ptr, tok, i, HALF)
    row = x_ptr + tok * (HEADS * 2 * HALF)
    _rope_heads(row, row, c, s, h, i, HEADS, HALF)


@triton.jit
def qkv_rope_store_kernel(qkv_ptr, pos_ptr, slot_ptr, cos_ptr, sin_ptr, q_ptr, k_ptr, v_ptr,
                          HEADS: tl.constexpr, KV_HEADS: tl.constexpr, HALF: tl.constexpr,
                          BLOCK_H: tl.constexpr, BLOCK_KV: tl.constexpr, BLOCK_D: tl.constexpr,
                          BLOCK_V: tl.constexpr):  # fmt: skip
    """Token program over one row ``[q heads | k heads | v heads]`` of the qkv projection:
    q -> RoPE -> row ``tok`` of q; k -> RoPE -> slot ``slot_ptr[tok]`` of the K cache; v copied
    (bits unchanged) to the same slot of the V cache. RoPE is ``_rope_heads``, as in
    rope_kernel. Elementwise: no reduction, nothing read from another token's row."""
    tok = tl.program_id(0).to(tl.int64)
    h = tl.arange(0, BLOCK_H)[:, None]
    i = tl.arange(0, BLOCK_D)[None, :]
    c, s = _rope_angles(cos_ptr, sin_ptr, pos_ptr, tok, i, HALF)
    row = qkv_ptr + tok * ((HEADS + 2 * KV_HEADS) * 2 * HALF)
    _rope_heads(row, q_ptr + tok * (HEADS * 2 * HALF), c, s, h, i, HEADS, HALF)
    slot = tl.load(slot_ptr + tok).to(tl.int64) * (KV_HEADS * 2 * HALF)
    hk = tl.arange(0, BLOCK_KV)[:, None]
    _rope_heads(row + HEADS * 2 * HALF, k_ptr + slot, c, s, hk, i, KV_HEADS, HALF)
    j = tl.arange(0, BLOCK_V)
    vmask = j < KV_HEADS * 2 * HALF
    v = tl.load(row + (HEADS + KV_HEADS) * 2 * HALF + j, mask=vmask)
    tl.store(v_ptr + slot + j, v, mask=vmask)


@triton.jit
def silu_mul_kernel(gu_ptr, out_ptr, INNER: tl.constexpr, BLOCK: tl.constexpr):
    """Program (row, column block): out = silu(g) * u in fp32, g | u the two row halves."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < INNER
    g = tl.load(gu_ptr + row * (2 * INNER) + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * (2 * INNER) + INNER + cols, mask=mask, other=0.0).to(tl.float32)
    silu = tl.math.div_rn(g, 1.0 + tl.exp(-g))
    tl.store(out_ptr + row * INNER + cols, (silu * u).to(out_ptr.dtype.element_ty), mask=mask)
