"""Triton kernels for row-local ops: one program per row (or per row and column block).

Invariant: a program handles exactly one row with a layout fixed by the row width (block =
next_pow2(width), num_warps a function of the width), so the only reduction (``tl.sum`` of the
squares in RMSNorm) has the same tree for every row of every batch. The other ops are
elementwise. Divisions and square roots are IEEE round-to-nearest (``div_rn``/``sqrt_rn``).
No batch-dependent integer is a kernel argument (the row comes from the grid). RoPE has one
expression (``_rope_heads``) shared by the in-place kernel and the fused qkv kernel, whose K/V
writes go to the token's slot (read from the slot mapping), never to another token's.
The gated activations (``silu_mul_kernel`` here, ``gelu_mul_kernel`` of `_gelu_kernel.py`) use
the software exp ``softexp`` (definition in its docstring; CPU replay
`samebits.kernels.replay.softexp`), never ``tl.exp`` (PTX ``ex2.approx``, no public definition).
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
def _pow2(k):
    """2^k (fp32) for an int32 k in [-126, 127]: the exponent field ``(k + 127) << 23`` alone."""
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def softexp(x):
    """exp(x) in fp32 (elementwise) by a fixed sequence of IEEE fp32 operations, each round to
    nearest even, each ``fma`` one rounding of the exact ``a * b + c``; no approximate
    hardware instruction, no division. Definition (the CPU replay is
    `samebits.kernels.replay.softexp.softexp`, bit for bit):

    1. ``xc = min(max(x, -104), 89)`` (below: the result is +0; above: +inf);
    2. ``t = fma(xc, LOG2E, S)``, ``n = t - S`` (S = 1.5 * 2^23: ``n`` is ``xc * LOG2E``
       rounded to an integer, ties to even; the subtraction is exact), and the integer
       ``k = bits(t) - bits(S)`` (= n exactly: t lies in [2^23, 2^24), one unit per ulp);
    3. Cody-Waite: ``r = fma(n, -LN2_HI, xc)``, ``r = fma(n, -LN2_LO, r)``
       (LN2_HI = 0.693359375, LN2_LO = -2.12194440e-4);
    4. ``p = fma(fma(fma(fma(fma(P0, r, P1), r, P2), r, P3), r, P4), r, P5)`` (Horner, the
       Cephes expf coefficients), ``e = fma(p, r * r, r) + 1.0`` (e^r, |r| <= ln2 / 2);
    5. ``y = e * 2^k`` rounded once: ``k1 = k >> 1`` (arithmetic shift), ``e * 2^k1`` exact by
       adding ``k1 << 23`` to the bits of e (e in [0.7, 1.42], |k1| <= 75: a normal result),
       times the normal factor ``2^(k - k1)`` (one IEEE multiply: gradual underflow to
       subnormals and overflow to +inf are that multiply's);
    6. a NaN ``x`` is returned as it is (``x != x`` selects it); -0.0 behaves as +0.0.

    Accuracy (test, `tests/kernels/test_replay_rows.py`): <= 2 ulp against float64 exp on
    [-104, 89]. Cost: 13 fp32 operations, 7 integer ones, 1 multiply, 1 compare and select:
    no int <-> float conversion instruction (``bits(t)`` replaces a ``cvt``).
    """
    xc = tl.minimum(tl.maximum(x, -104.0), 89.0)
    t = tl.fma(xc, 1.4426950408889634, 12582912.0)
    n = t - 12582912.0
    r = tl.fma(n, -0.693359375, xc)
    r = tl.fma(n, 2.12194440e-4, r)
    p = tl.fma(1.9875691500e-4, r, 1.3981999507e-3)
    p = tl.fma(p, r, 8.3334519073e-3)
    p = tl.fma(p, r, 4.1665795894e-2)
    p = tl.fma(p, r, 1.6666665459e-1)
    p = tl.fma(p, r, 5.0000001201e-1)
    e = tl.fma(p, r * r, r) + 1.0
    k = t.to(tl.int32, bitcast=True) - 0x4B400000
    k1 = k >> 1
    scaled = (e.to(tl.int32, bitcast=True) + (k1 << 23)).to(tl.float32, bitcast=True)
    y = scaled * _pow2(k - k1)
    return tl.where(x != x, x, y)


@triton.jit
def silu_mul_kernel(gu_ptr, out_ptr, INNER: tl.constexpr, BLOCK: tl.constexpr):
    """Program (row, column block): out = silu(g) * u in fp32, g | u the two row halves;
    silu(g) = div_rn(g, 1 + softexp(-g))."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < INNER
    g = tl.load(gu_ptr + row * (2 * INNER) + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * (2 * INNER) + INNER + cols, mask=mask, other=0.0).to(tl.float32)
    silu = tl.math.div_rn(g, 1.0 + softexp(-g))
    tl.store(out_ptr + row * INNER + cols, (silu * u).to(out_ptr.dtype.element_ty), mask=mask)
