"""The GPU plan's fp32 arithmetic on the CPU, bit for bit: ``fma.rn.f32``, the software exp
``softexp`` of `kernels/triton/_row_kernels.py` (its definition is that function's docstring)
and the software exp2 ``softexp2`` of `kernels/triton/_softexp2.py` (not launched yet).

numpy float32 has no fused multiply-add, so :func:`fma_f32` is an exactly rounded
construction in float64 (no C compiler needed, so no fallback to announce): the product of
two fp32 values is exact in float64 (48 significant bits); the float64 sum ``s = p + c`` is
turned into the round-to-odd sum (the exact error of the sum by TwoSum; an inexact ``s`` with
an even last bit steps one ulp toward the exact value); rounding that round-to-odd value to
fp32 is the correctly rounded ``fma`` (float64 carries more than fp32's 24 + 2 bits: Boldo &
Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms using rounding to
odd", IEEE TC 2008). Non-finite operands take the plain float64 result. NaN results are the
GPU's canonical ``0x7FFFFFFF`` (every arithmetic result here; a select keeps its input).
Tested against the C library's ``fmaf`` and an exact rational model.
"""

from __future__ import annotations

import numpy as np

FP32_NAN = np.uint32(0x7FFFFFFF)
X_LO, X_HI = np.float32(-104.0), np.float32(89.0)
SHIFT = np.float32(12582912.0)
LOG2E = np.float32(1.4426950408889634)
NEG_LN2_HI = np.float32(-0.693359375)
NEG_LN2_LO = np.float32(2.12194440e-4)
POLY = tuple(np.float32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                                     4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1))  # fmt: skip
ONE = np.float32(1.0)
X2_LO, X2_HI = np.float32(-151.0), np.float32(128.0)
POLY2 = tuple(np.float32(c) for c in (1.535336188319500e-4, 1.339887440266574e-3,
                                      9.618437357674640e-3, 5.550332471162809e-2,
                                      2.402264791363012e-1, 6.931472028550421e-1))  # fmt: skip
SHIFT_BITS = np.int32(0x4B400000)  # the bits of SHIFT = 1.5 * 2^23


def f32(a) -> np.ndarray:
    """An fp32 array (uint32 bit arrays are viewed, not converted)."""
    a = np.asarray(a)
    return a.view(np.float32) if a.dtype == np.uint32 else a.astype(np.float32, copy=False)


def canon(a: np.ndarray) -> np.ndarray:
    """fp32 with every NaN made the GPU's canonical NaN 0x7FFFFFFF (result of an fp op)."""
    a = np.asarray(a, np.float32)
    return np.where(np.isnan(a), FP32_NAN, a.view(np.uint32)).view(np.float32)


def _round_to_odd(s: np.ndarray, err: np.ndarray) -> np.ndarray:
    """The float64 of the exact ``s + err`` rounded to odd (``s`` its round to nearest)."""
    even = (s.view(np.uint64) & np.uint64(1)) == 0
    step = np.nextafter(s, np.where(err > 0, np.inf, -np.inf))
    return np.where((err != 0) & even, step, s)


def fma_f32(a, b, c) -> np.ndarray:
    """``fma.rn.f32``: fp32 ``a * b + c`` with one rounding (elementwise, broadcast)."""
    a64, b64, c64 = (f32(v).astype(np.float64) for v in (a, b, c))
    with np.errstate(invalid="ignore", over="ignore"):
        p = a64 * b64  # exact: 24 + 24 significant bits, exponents far inside float64's
        s = p + c64
        bb = s - p
        err = (p - (s - bb)) + (c64 - bb)  # TwoSum: exact for finite p, c
        finite = np.isfinite(s) & np.isfinite(p) & np.isfinite(c64)
        odd = np.where(finite, _round_to_odd(s, np.where(finite, err, 0.0)), s)
        return canon(odd.astype(np.float32))


def add_f32(a, b) -> np.ndarray:
    """``add.f32``: IEEE round to nearest, canonical NaN."""
    with np.errstate(invalid="ignore", over="ignore"):
        return canon(np.add(f32(a), f32(b), dtype=np.float32))


def mul_f32(a, b) -> np.ndarray:
    """``mul.f32``: IEEE round to nearest, canonical NaN."""
    with np.errstate(invalid="ignore", over="ignore", under="ignore"):
        return canon(np.multiply(f32(a), f32(b), dtype=np.float32))


def div_rn(a, b) -> np.ndarray:
    """``div.rn.f32`` (``tl.math.div_rn``): IEEE division, round to nearest, canonical NaN."""
    with np.errstate(invalid="ignore", over="ignore", under="ignore", divide="ignore"):
        return canon(np.divide(f32(a), f32(b), dtype=np.float32))


def sqrt_rn(a) -> np.ndarray:
    """``sqrt.rn.f32`` (``tl.math.sqrt_rn``): IEEE square root, canonical NaN."""
    with np.errstate(invalid="ignore"):
        return canon(np.sqrt(f32(a), dtype=np.float32))


def _pow2(k: np.ndarray) -> np.ndarray:
    """2^k for int32 k in [-126, 127]: the exponent field ``(k + 127) << 23``."""
    return ((k + 127).astype(np.uint32) << np.uint32(23)).view(np.float32)


def softexp(x) -> np.ndarray:
    """`_row_kernels.softexp`: exp(x) in fp32 by its fixed sequence, bit for bit. The kernel
    takes the integer k from the bits of ``t`` and scales by an exponent add then one
    multiply; here k = n converted and ``(e * 2^(k - k1)) * 2^k1``: the same values (k = n
    exactly; both scalings are one exact step then one rounding of e * 2^k; tests compare the
    two on the interpreter)."""
    x = f32(x)
    nan = np.isnan(x)
    xc = np.minimum(np.maximum(np.where(nan, np.float32(0), x), X_LO), X_HI)
    n = add_f32(fma_f32(xc, LOG2E, SHIFT), -SHIFT)
    r = fma_f32(n, NEG_LN2_HI, xc)
    r = fma_f32(n, NEG_LN2_LO, r)
    p = fma_f32(POLY[0], r, POLY[1])
    for c in POLY[2:]:
        p = fma_f32(p, r, c)
    e = add_f32(fma_f32(p, mul_f32(r, r), r), ONE)
    k = n.astype(np.int32)
    k1 = k >> 1
    y = mul_f32(mul_f32(e, _pow2(k - k1)), _pow2(k1))
    return np.where(nan, x, y)


def _scale(e: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``e * 2^k`` rounded once, k from the bits of ``t = n + SHIFT``: the exponent add of
    ``k >> 1`` into e (exact), times ``2^(k - (k >> 1))`` (the kernels' scaling)."""
    k = t.view(np.int32) - SHIFT_BITS
    k1 = k >> 1
    return mul_f32((e.view(np.int32) + (k1 << 23)).view(np.float32), _pow2(k - k1))


def softexp2(x) -> np.ndarray:
    """`_softexp2.softexp2`: 2^x in fp32 by its fixed sequence, bit for bit."""
    x = f32(x)
    nan = np.isnan(x)
    xc = np.minimum(np.maximum(np.where(nan, np.float32(0), x), X2_LO), X2_HI)
    t = add_f32(xc, SHIFT)
    n = add_f32(t, -SHIFT)
    fr = add_f32(xc, -n)
    p = fma_f32(POLY2[0], fr, POLY2[1])
    for c in POLY2[2:]:
        p = fma_f32(p, fr, c)
    y = _scale(fma_f32(p, fr, ONE), t)
    return np.where(nan, x, y)
