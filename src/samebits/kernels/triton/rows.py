"""Row-local ops on the GPU: RMSNorm (plain, fused residual add, per-head), RoPE, the fused
qkv split + RoPE + KV store, SiLU-and-mul.

Invariant: one program per row (RoPE: per token; SiLU: per row and fixed column block) with a
layout that depends only on the row width, so every row's bits are independent of M and of
the other rows. Math is fp32; results are cast to the requested dtype at the end.
"""

from __future__ import annotations

import torch
import triton

from samebits.kernels.triton._fused_kernels import sum_add_rms_norm_kernel
from samebits.kernels.triton._row_kernels import (
    qkv_rope_store_kernel,
    rms_norm_kernel,
    rope_kernel,
    silu_mul_kernel,
)

__all__ = [
    "add_rms_norm", "head_rms_norm", "qkv_rope_store", "rms_norm", "rope", "row_num_warps",
    "silu_mul", "sum_add_rms_norm",
]  # fmt: skip

SILU_BLOCK = 1024
SILU_WARPS = 4
ROPE_WARPS = 4


def row_num_warps(block: int) -> int:
    """num_warps of a one-program-per-row kernel: a fixed function of the row block."""
    return min(8, max(1, block // 256))


def _require_contiguous(name: str, *tensors: torch.Tensor) -> None:
    for t in tensors:
        if not t.is_contiguous():
            raise ValueError(f"{name} expects contiguous tensors (got strides {t.stride()})")


def _launch_rms(x, res, weight, out, eps: float, width: int, add: bool) -> None:
    rows = x.numel() // width
    if rows == 0:
        return
    block = triton.next_power_of_2(width)
    rms_norm_kernel[(rows,)](
        x, res if res is not None else x, weight, out, eps, WIDTH=width, BLOCK=block,
        ADD_RESIDUAL=add, num_warps=row_num_warps(block),
    )  # fmt: skip


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype):
    """``x [M, H] -> [M, H]``: ``(x * 1/sqrt(mean(x^2) + eps)) * weight`` in fp32, cast."""
    _require_contiguous("rms_norm", x, weight)
    out = torch.empty(x.shape, device=x.device, dtype=out_dtype)
    _launch_rms(x, None, weight, out, eps, x.shape[-1], add=False)
    return out


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype
) -> torch.Tensor:
    """``residual += x`` in place (fp32 residual), then ``rms_norm(residual)``."""
    _require_contiguous("add_rms_norm", x, residual, weight)
    if residual.dtype != torch.float32 or residual.shape != x.shape:
        raise ValueError("add_rms_norm needs an fp32 residual of x's shape")
    out = torch.empty(x.shape, device=x.device, dtype=out_dtype)
    _launch_rms(x, residual, weight, out, eps, x.shape[-1], add=True)
    return out


def sum_add_rms_norm(
    partials: torch.Tensor, bias: torch.Tensor | None, residual: torch.Tensor,
    weight: torch.Tensor, eps: float, out_dtype: torch.dtype,
) -> torch.Tensor:  # fmt: skip
    """A split-K linear's partials ``[S, M, N]`` -> its output rows (summed in split order,
    + bias, rounded to ``out_dtype``: what ``ordered_sum_kernel`` writes), then ``residual +=``
    those rows and ``rms_norm(residual)``, in one launch: the same bits as the linear's ordered
    sum followed by :func:`add_rms_norm` (evidence: test, certificate)."""
    _require_contiguous("sum_add_rms_norm", partials, residual, weight)
    splits, m, n = partials.shape
    if partials.dtype != torch.float32 or residual.dtype != torch.float32:
        raise ValueError("sum_add_rms_norm needs fp32 partials and an fp32 residual")
    if tuple(residual.shape) != (m, n) or (bias is not None and tuple(bias.shape) != (n,)):
        raise ValueError(f"sum_add_rms_norm: residual must be [{m}, {n}], bias [{n}]")
    out = torch.empty((m, n), device=partials.device, dtype=out_dtype)
    if m == 0:
        return out
    block = triton.next_power_of_2(n)
    sum_add_rms_norm_kernel[(m,)](
        partials, bias if bias is not None else partials, residual, weight, out, m, eps,
        SPLITS=splits, HAS_BIAS=bias is not None, WIDTH=n, BLOCK=block,
        num_warps=row_num_warps(block),
    )  # fmt: skip
    return out


def head_rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """``x [M, heads, D]`` in place: RMSNorm of each (row, head) over D (Qwen3 q/k norm)."""
    _require_contiguous("head_rms_norm", x, weight)
    _launch_rms(x, None, weight, x, eps, x.shape[-1], add=False)


def rope(x: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> None:
    """``x [M, heads, D]`` in place, rotate-half RoPE at ``positions`` (tables [P, D/2])."""
    _require_contiguous("rope", x, positions, cos, sin)
    m, heads, d = x.shape
    if d % 2 or cos.shape[-1] != d // 2 or sin.shape != cos.shape:
        raise ValueError(f"rope needs even D and cos/sin [P, {d // 2}]")
    if m == 0:
        return
    rope_kernel[(m,)](
        x, positions, cos, sin, HEADS=heads, HALF=d // 2, BLOCK_H=triton.next_power_of_2(heads),
        BLOCK_D=triton.next_power_of_2(d // 2), num_warps=ROPE_WARPS,
    )  # fmt: skip


def qkv_rope_store(
    qkv: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor, cos: torch.Tensor,
    sin: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, heads: int,
) -> torch.Tensor:  # fmt: skip
    """``qkv [M, (heads + 2 * kv_heads) * D]`` -> q ``[M, heads, D]`` (new, contiguous) with
    RoPE at ``positions``; RoPE'd k and raw v written to row ``slots[t]`` of ``k_cache`` /
    ``v_cache`` ``[S, kv_heads, D]``. One launch; the same bits as ``rope`` of contiguous q
    and k copies followed by ``index_copy_`` into the caches. Tokens with distinct slots
    write disjoint cache rows; tokens sharing a slot (a CUDA graph's padding rows, all aimed
    at the sink block no real token reads) leave it holding one of them, as index_copy_ does."""
    _check_qkv_rope_store(qkv, positions, slots, cos, sin, k_cache, v_cache, heads)
    m = qkv.shape[0]
    _, kv_heads, d = k_cache.shape
    q = torch.empty((m, heads, d), device=qkv.device, dtype=qkv.dtype)
    if m == 0:
        return q
    qkv_rope_store_kernel[(m,)](
        qkv, positions, slots, cos, sin, q, k_cache, v_cache, HEADS=heads, KV_HEADS=kv_heads,
        HALF=d // 2, BLOCK_H=triton.next_power_of_2(heads),
        BLOCK_KV=triton.next_power_of_2(kv_heads), BLOCK_D=triton.next_power_of_2(d // 2),
        BLOCK_V=triton.next_power_of_2(kv_heads * d), num_warps=ROPE_WARPS,
    )  # fmt: skip
    return q


def _check_qkv_rope_store(qkv, positions, slots, cos, sin, k_cache, v_cache, heads) -> None:
    _require_contiguous("qkv_rope_store", qkv, positions, slots, cos, sin, k_cache, v_cache)
    _, kv_heads, d = k_cache.shape
    if d % 2 or cos.shape[-1] != d // 2 or sin.shape != cos.shape:
        raise ValueError(f"qkv_rope_store needs even D and cos/sin [P, {d // 2}]")
    if qkv.dim() != 2 or qkv.shape[1] != (heads + 2 * kv_heads) * d:
        raise ValueError(
            f"qkv_rope_store: qkv {tuple(qkv.shape)} is not [M, {heads}+2*{kv_heads} heads x {d}]"
        )
    if v_cache.shape != k_cache.shape or {k_cache.dtype, v_cache.dtype} != {qkv.dtype}:
        raise ValueError("qkv_rope_store: k/v caches of one shape, in qkv's dtype")
    if (
        slots.dtype != torch.int64
        or slots.shape != (qkv.shape[0],)
        or positions.shape != slots.shape
    ):
        raise ValueError("qkv_rope_store: one int64 slot and one position per token")


def gelu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``[M, 2I] -> [M, I]`` in gate_up's dtype: ``gelu_tanh(g) * u`` in fp32 (Gemma's GeGLU;
    `_gelu_kernel.py`), launched as `silu_mul` is (same blocks and warps)."""
    from samebits.kernels.triton._gelu_kernel import gelu_mul_kernel

    return _gated(gelu_mul_kernel, "gelu_mul", gate_up)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``[M, 2I] -> [M, I]`` in gate_up's dtype: ``silu(g) * u`` in fp32."""
    return _gated(silu_mul_kernel, "silu_mul", gate_up)


def _gated(kernel, name: str, gate_up: torch.Tensor) -> torch.Tensor:
    """One launch of a gated activation kernel: a row per program row, column blocks of
    ``min(SILU_BLOCK, next_pow2(I))`` (static facts of the width, never of M)."""
    _require_contiguous(name, gate_up)
    m, two_i = gate_up.shape
    inner = two_i // 2
    out = torch.empty((m, inner), device=gate_up.device, dtype=gate_up.dtype)
    if m == 0:
        return out
    block = min(SILU_BLOCK, triton.next_power_of_2(inner))
    grid = (m, triton.cdiv(inner, block))
    kernel[grid](gate_up, out, INNER=inner, BLOCK=block, num_warps=SILU_WARPS)
    return out
