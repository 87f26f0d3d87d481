"""Triton kernel of Gemma's GeGLU row op: out = gelu_tanh(g) * u (transformers'
gelu_pytorch_tanh), g | u the two halves of a gate_up row.

gelu_tanh(g) = 0.5 g (1 + tanh(c (g + 0.044715 g^3))) = g * sigmoid(z) with
z = g (K1 + K2 g^2), K1 = 2 sqrt(2 / pi), K2 = 0.044715 K1; computed in fp32 as
div_rn(g, 1 + softexp(-z)) with -z = fma(-q, g, +0), -q = fma(g * g, -K2, -K1) (the roundings
of the compiled code, stated; softexp is the software exp of `_row_kernels.py`, definition in
its docstring; softexp(-z) -> inf for very negative z gives -0, the limit). Every element is
a function of its own g and u: no reduction, so the row, the batch and the launch
never change a bit.
"""

from __future__ import annotations

import triton
import triton.language as tl

from samebits.kernels.triton._row_kernels import softexp

GELU_K1 = 1.5957691216057308  # 2 sqrt(2 / pi)
GELU_K2 = 0.07135481627260025  # 0.044715 * GELU_K1


@triton.jit
def gelu_mul_kernel(gu_ptr, out_ptr, INNER: tl.constexpr, BLOCK: tl.constexpr):
    """Program (row, column block): out = gelu_tanh(g) * u in fp32."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < INNER
    g = tl.load(gu_ptr + row * (2 * INNER) + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * (2 * INNER) + INNER + cols, mask=mask, other=0.0).to(tl.float32)
    # -z = -(g * (K1 + K2 g^2)) with its two roundings stated (no contraction left to the
    # compiler): nq = fma(g*g, -K2, -K1) (= -fma(g*g, K2, K1) exactly), -z = fma(nq, g, +0)
    nq = tl.fma(g * g, -0.07135481627260025, -1.5957691216057308)
    gelu = tl.math.div_rn(g, 1.0 + softexp(tl.fma(nq, g, 0.0)))
    tl.store(out_ptr + row * INNER + cols, (gelu * u).to(out_ptr.dtype.element_ty), mask=mask)
