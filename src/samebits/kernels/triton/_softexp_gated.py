"""The gated activation kernels with the software exp (`_softexp.softexp`) in place of
``tl.exp``: ``silu_mul_kernel`` and ``gelu_mul_kernel`` of `_row_kernels.py` /
`_gelu_kernel.py` with that one call changed, everything else (blocks, loads, div_rn, the
cast) the same. Candidates, not launched by the engine yet: the kernel prover does not model
the bit casts and float compares of `softexp` (docs/cpu_replay.md, "what is left"), so the
engine's certified kernels keep ``tl.exp`` until it does. benchmarks/replay_rows_check.py runs
them on the H200 against the CPU replay (`samebits.kernels.replay.rows`) and times them
against the ``tl.exp`` kernels.
"""

from __future__ import annotations

import triton
import triton.language as tl

from samebits.kernels.triton._softexp import softexp


@triton.jit
def silu_mul_softexp_kernel(gu_ptr, out_ptr, INNER: tl.constexpr, BLOCK: tl.constexpr):
    """Program (row, column block): out = g / (1 + softexp(-g)) * u in fp32."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < INNER
    g = tl.load(gu_ptr + row * (2 * INNER) + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * (2 * INNER) + INNER + cols, mask=mask, other=0.0).to(tl.float32)
    silu = tl.math.div_rn(g, 1.0 + softexp(-g))
    tl.store(out_ptr + row * INNER + cols, (silu * u).to(out_ptr.dtype.element_ty), mask=mask)


@triton.jit
def gelu_mul_softexp_kernel(gu_ptr, out_ptr, INNER: tl.constexpr, BLOCK: tl.constexpr):
    """Program (row, column block): out = g / (1 + softexp(-z)) * u in fp32 (GeGLU)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < INNER
    g = tl.load(gu_ptr + row * (2 * INNER) + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * (2 * INNER) + INNER + cols, mask=mask, other=0.0).to(tl.float32)
    z = g * (1.5957691216057308 + 0.07135481627260025 * (g * g))
    gelu = tl.math.div_rn(g, 1.0 + softexp(-z))
    tl.store(out_ptr + row * INNER + cols, (gelu * u).to(out_ptr.dtype.element_ty), mask=mask)
