"""The torch MoE combine (`samebits.kernels.moe.combine`) stated as Triton text, one kernel
per torch op, for the kernel prover: `moe_combine_kernel` is proved equal to this sequence.

`combine(outputs, weights, dtype)` runs, on outputs [n, k, H] and float32 weights [n, k]:
``acc = torch.mul(outputs[:, 0].float(), weights[:, :1])``, then for r = 1 .. k-1
``acc = torch.add(acc, torch.mul(outputs[:, r].float(), weights[:, r : r + 1]))``, then
``acc.to(dtype)``: each an elementwise kernel over [n, H] writing a fresh tensor (the
``.float()`` of a bfloat16 view is exact; the weight column broadcasts over H). This module
is never imported by the engine (the prover parses its text; the certificates record its
SHA-256, so a change of it makes them stale).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def torch_rank_mul_kernel(o_ptr, w_ptr, p_ptr, H, TOP_K: tl.constexpr, R: tl.constexpr,
                          BLOCK: tl.constexpr):  # fmt: skip
    """``p = torch.mul(outputs[:, R].float(), weights[:, R : R + 1])`` ([n, H] fp32)."""
    t = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = c < H
    o = tl.load(o_ptr + (t * TOP_K + R) * H + c, mask=live, other=0.0).to(tl.float32)
    tl.store(p_ptr + t * H + c, o * tl.load(w_ptr + t * TOP_K + R), mask=live)


@triton.jit
def torch_add_kernel(a_ptr, b_ptr, s_ptr, H, BLOCK: tl.constexpr):
    """``s = torch.add(a, b)`` ([n, H] fp32)."""
    t = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = c < H
    a = tl.load(a_ptr + t * H + c, mask=live, other=0.0)
    tl.store(s_ptr + t * H + c, a + tl.load(b_ptr + t * H + c, mask=live, other=0.0), mask=live)


@triton.jit
def torch_cast_kernel(a_ptr, y_ptr, H, BLOCK: tl.constexpr):
    """``y = a.to(y.dtype)`` ([n, H])."""
    t = tl.program_id(0).to(tl.int64)
    c = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    live = c < H
    a = tl.load(a_ptr + t * H + c, mask=live, other=0.0)
    tl.store(y_ptr + t * H + c, a.to(y_ptr.dtype.element_ty), mask=live)
