"""A software fp32 exp for the GPU plan's row kernels, with a written definition (so a CPU
replays its bits: `samebits.kernels.replay.softexp`), in place of ``tl.exp`` (PTX
``ex2.approx``, whose bits have no public definition).

Definition of ``softexp(x)`` (every step one IEEE fp32 operation, round to nearest even;
each ``fma`` one rounding of the exact ``a * b + c``):

1. ``xc = min(max(x, X_LO), X_HI)`` (X_LO = -104, X_HI = 89: below, the result is +0; above,
   +inf; so -inf -> +0, +inf -> +inf);
2. ``t = fma(xc, LOG2E, SHIFT)``, ``n = t - SHIFT`` (SHIFT = 1.5 * 2^23: ``n`` is the exact
   product ``xc * LOG2E`` rounded to the nearest integer, ties to even; both steps exact);
3. Cody-Waite: ``r = fma(n, -LN2_HI, xc)``, ``r = fma(n, -LN2_LO, r)``;
4. ``p = fma(fma(fma(fma(fma(P0, r, P1), r, P2), r, P3), r, P4), r, P5)`` (Horner),
   ``e = fma(p, r * r, r) + 1.0``  (e^r on |r| <= ln2/2; the Cephes expf coefficients,
   the ones `kernels/cpu/sbexp.h` uses);
5. ``2^n`` in two normal factors: ``n1 = floor(n / 2)`` (integer shift), ``n2 = n - n1``,
   ``y = (e * 2^n2) * 2^n1`` (``2^k`` built by the integer exponent add ``(k + 127) << 23``;
   the first product is exact, the second rounds once: gradual underflow to subnormals and
   overflow to +inf are those of one IEEE multiply);
6. NaN in, the same NaN out (a select: ``x != x``); -0.0 behaves as +0.0 (exp(-0) = 1).

Accuracy (test, `tests/kernels/test_replay_rows.py`): <= 2 ulp against float64 exp over
[-104, 89] (subnormal results: within one subnormal ulp). No division, no approximate
hardware instruction (the PTX has no ``ex2.approx``: benchmarks/ptx_survey_aot.py).
"""

from __future__ import annotations

import triton
import triton.language as tl

X_LO = -104.0
X_HI = 89.0
SHIFT = 12582912.0  # 1.5 * 2^23
LOG2E = 1.4426950408889634
LN2_HI = 0.693359375
LN2_LO = -2.12194440e-4
P0 = 1.9875691500e-4
P1 = 1.3981999507e-3
P2 = 8.3334519073e-3
P3 = 4.1665795894e-2
P4 = 1.6666665459e-1
P5 = 5.0000001201e-1


@triton.jit
def _pow2(k):
    """2^k (fp32) for an integer-valued int32 k in [-126, 127]: the exponent field alone."""
    return ((k + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def softexp(x):
    """exp(x) in fp32 by the fixed sequence of the module docstring (elementwise)."""
    xc = tl.minimum(tl.maximum(x, -104.0), 89.0)
    n = tl.fma(xc, 1.4426950408889634, 12582912.0) - 12582912.0
    r = tl.fma(n, -0.693359375, xc)
    r = tl.fma(n, 2.12194440e-4, r)
    p = tl.fma(1.9875691500e-4, r, 1.3981999507e-3)
    p = tl.fma(p, r, 8.3334519073e-3)
    p = tl.fma(p, r, 4.1665795894e-2)
    p = tl.fma(p, r, 1.6666665459e-1)
    p = tl.fma(p, r, 5.0000001201e-1)
    e = tl.fma(p, r * r, r) + 1.0
    k = n.to(tl.int32)
    k1 = k >> 1
    y = (e * _pow2(k - k1)) * _pow2(k1)
    return tl.where(x != x, x, y)
