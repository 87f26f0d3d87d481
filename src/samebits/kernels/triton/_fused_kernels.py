"""Triton kernels that fuse the last step of one op with the next op (launches saved; the same
arithmetic in the same order as the two ops' own kernels).

``sum_add_rms_norm_kernel``: after a split-K grid (``linear_partials_kernel``), the ordered sum
of its partials (``ordered_sum_kernel``'s arithmetic) fused with ``rms_norm_kernel``'s residual
add and RMSNorm. One program per row, layout fixed by the row width (as the row kernels).
"""

from __future__ import annotations

import triton
import triton.language as tl

from samebits.kernels.triton._row_kernels import _rms_apply


@triton.jit(do_not_specialize=["M"])
def sum_add_rms_norm_kernel(p_ptr, b_ptr, res_ptr, w_ptr, out_ptr, M, eps,
                            SPLITS: tl.constexpr, HAS_BIAS: tl.constexpr, WIDTH: tl.constexpr,
                            BLOCK: tl.constexpr):  # fmt: skip
    """Row program after a split-K grid's partials ``[SPLITS, M, WIDTH]`` (fp32): the row of
    the linear's output as ``ordered_sum_kernel`` writes it (partial 0, + partials 1.. in
    order, + bias, rounded to ``out_ptr``'s dtype), then ``rms_norm_kernel``'s fused residual
    add and RMSNorm on it. One launch instead of two, the same arithmetic in the same order."""
    cols = tl.arange(0, BLOCK)
    mask = cols < WIDTH
    offs = tl.program_id(0).to(tl.int64) * WIDTH + cols
    mn = M.to(tl.int64) * WIDTH
    total = tl.load(p_ptr + offs, mask=mask, other=0.0)
    for s in tl.static_range(1, SPLITS):
        total = total + tl.load(p_ptr + s * mn + offs, mask=mask, other=0.0)
    if HAS_BIAS:
        total = total + tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    r = total.to(out_ptr.dtype.element_ty).to(tl.float32)
    r = tl.load(res_ptr + offs, mask=mask, other=0.0) + r
    tl.store(res_ptr + offs, r, mask=mask)
    y = _rms_apply(r, w_ptr, cols, mask, eps, WIDTH)
    tl.store(out_ptr + offs, y.to(out_ptr.dtype.element_ty), mask=mask)
