"""A software fp32 exp2 for the attention kernel (issue 27), with a written definition that a
CPU replays bit for bit (`samebits.kernels.replay.softexp.softexp2`), in place of ``tl.exp2``
(PTX ``ex2.approx.ftz``, whose bits have no public definition on arbitrary inputs). The
attention computes its exponentials by `ex2q` instead (end of this file): the SFU's
``ex2.approx.ftz`` on multiples of 2^-12 only, where its bits are a measured table that every
GPU re-checks at start (`kernels/replay/ex2q.py`).

Definition of ``softexp2(x)`` (every step one IEEE fp32 operation, round to nearest even;
each ``fma`` one rounding of the exact ``a * b + c``):

1. ``xc = min(max(x, -151), 128)`` (below: the result is +0; at 128 and above: +inf; so
   -inf -> +0, +inf -> +inf);
2. ``t = xc + S``, ``n = t - S`` (S = 1.5 * 2^23: ``n`` is xc rounded to an integer, ties
   to even; the subtraction is exact), ``f = xc - n`` (exact, |f| <= 1/2), and the integer
   ``k = bits(t) - bits(S)`` (= n);
3. ``p = fma(fma(fma(fma(fma(Q0, f, Q1), f, Q2), f, Q3), f, Q4), f, Q5)`` (Horner, the
   Cephes exp2f coefficients), ``e = fma(p, f, 1.0)`` (2^f);
4. ``y = e * 2^k`` rounded once, as `_row_kernels.softexp` does: ``k1 = k >> 1``, ``e * 2^k1``
   exact by adding ``k1 << 23`` to the bits of e, times the normal factor ``2^(k - k1)``
   (gradual underflow to subnormals, overflow to +inf: that one multiply's);
5. a NaN ``x`` is returned as it is (``x != x`` selects it); -0.0 behaves as +0.0.

`softexp2_nonpos(x)` computes the same bits for every x <= 0 or NaN (the attention kernel's
exponentials: a score or a running max minus a max at least as large) with fewer
instructions: no upper clamp (x <= 0), the integer n by the even constant S + 64 (the same n:
t stays in [2^23, 2^24), whose ulp is 1, and ties go to the even integer either way), and
e * 2^n rounded once as (e * 2^(n + 64), exact and normal) * 2^-64 (every intermediate exact,
one rounding of the same product). The bits of t shifted left by 23 are (n + 64) << 23, since
the low 22 bits of S's bits are 0. Evidence: that argument, and a test on every fp32 in
[-151, -120] (the subnormal and zero results) and 400,000 samples of (-inf, 0]
(`tests/kernels/triton/test_triton_softexp.py`).

Accuracy (test, `tests/kernels/test_replay_rows.py`): <= 1 ulp against float64 exp2 for
normal results (0.93 ulp measured on 4M points), subnormal results within one subnormal
ulp; no flush to zero (``ex2.approx.ftz`` flushes). Cost: 2 clamps, 3 adds, 6 fma, 5
integer operations, 1 multiply, a compare and a select; no conversion instruction.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _pow2i(k):
    """2^k (fp32) for an int32 k in [-126, 127]: the exponent field ``(k + 127) << 23``."""
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _exp2_frac(f):
    """2^f for |f| <= 1/2: step 3 of the definition (Horner, the Cephes exp2f coefficients)."""
    p = tl.fma(1.535336188319500e-4, f, 1.339887440266574e-3)
    p = tl.fma(p, f, 9.618437357674640e-3)
    p = tl.fma(p, f, 5.550332471162809e-2)
    p = tl.fma(p, f, 2.402264791363012e-1)
    p = tl.fma(p, f, 6.931472028550421e-1)
    return tl.fma(p, f, 1.0)


@triton.jit
def softexp2(x):
    """2^x in fp32 by the fixed sequence of the module docstring (elementwise)."""
    xc = tl.minimum(tl.maximum(x, -151.0), 128.0)
    t = xc + 12582912.0
    n = t - 12582912.0
    f = xc - n
    e = _exp2_frac(f)
    k = t.to(tl.int32, bitcast=True) - 0x4B400000
    k1 = k >> 1
    scaled = (e.to(tl.int32, bitcast=True) + (k1 << 23)).to(tl.float32, bitcast=True)
    y = scaled * _pow2i(k - k1)
    return tl.where(x != x, x, y)


@triton.jit
def softexp2_nonpos(x):
    """`softexp2(x)`'s bits for x <= 0 or NaN, in fewer instructions (module docstring)."""
    xc = tl.maximum(x, -151.0)
    t = xc + 12582976.0
    n = t - 12582976.0
    f = xc - n
    e = _exp2_frac(f)
    bits = e.to(tl.int32, bitcast=True) + (t.to(tl.int32, bitcast=True) << 23)
    y = bits.to(tl.float32, bitcast=True) * 5.421010862427522e-20  # 2^-64
    return tl.where(x != x, x, y)


@triton.jit
def ex2_ftz(x):
    """PTX ``ex2.approx.ftz.f32`` (the SFU's exponential), elementwise. Its bits are defined
    only where `ex2q` feeds it: multiples of 2^-12 (`kernels/replay/ex2q.py`)."""
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x],
                                     dtype=tl.float32, is_pure=True, pack=1)  # fmt: skip


@triton.jit
def ex2q(x):
    """2^x for x <= 0 or NaN, the attention's exponential: x rounded to a multiple of 2^-12
    (ties to even; ``fma(x, 4096, S)`` rounds once), then `ex2_ftz`. Definition and CPU
    replay: `samebits.kernels.replay.ex2q` (a 4,096-entry table, checked on every GPU at start)."""
    t = tl.fma(x, 4096.0, 12582912.0)
    return ex2_ftz((t - 12582912.0) * 0.000244140625)
