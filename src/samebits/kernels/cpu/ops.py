"""The CPU op sets: `InvariantOps` (batch-invariant) and `FastOps` (stock torch: MKL/oneDNN,
SDPA — fast, and *not* batch-invariant; on CUDA it is the GPU plan's negative control too).
Both implement `samebits.kernels.interface.Ops`; `samebits.kernels.registry` names their
factories (`invariant_ops`: cpu/invariant, `fast_ops`: cpu/fast and cuda/fast)."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from samebits.kernels.cpu import attention as cpu_attention
from samebits.kernels.cpu import rowwise, sbattn, sbrow
from samebits.kernels.cpu.linear import TiledLinear
from samebits.kernels.cpu.plan import linear_splits
from samebits.kernels.cpu.sbgemm import SbLinear
from samebits.kernels.cpu.sdpa import causal_sdpa
from samebits.kernels.interface import ATTENTION_SPAN, FLOAT32_ROLES, Linear
from samebits.kernels.metadata import FlatBatch
from samebits.kernels.moe import FastMoe, InvariantMoe
from samebits.kernels.placement import TorchPlacement
from samebits.kernels.quantized import QuantizedTensor


class InvariantOps(InvariantMoe, TorchPlacement):
    """Row-local kernels whose reduction order depends only on the plan and the element's
    logical position (see kernels/cpu/*.py for the per-op invariant)."""

    def __init__(
        self, linear_tiles: tuple[int, ...], key_tile: int, linear_kernel: str = "mkl-tiles",
        num_threads: int = 1, attention_kernel: str = "numba", span: int = ATTENTION_SPAN,
    ):  # fmt: skip
        """`span`: the plan's attention span (keys per span; a multiple of `key_tile`)."""
        if span < key_tile or span % key_tile:
            raise ValueError(f"attention span {span} is not a multiple of key tile {key_tile}")
        self.linear_tiles = linear_tiles
        self.key_tile = key_tile
        self.span = span
        self.linear_kernel = linear_kernel
        self.num_threads = num_threads
        self.attention_kernel = attention_kernel

    def weight(self, t: torch.Tensor) -> torch.Tensor:
        return t.contiguous()

    def embedding(self, table: torch.Tensor) -> torch.Tensor:
        return table

    def linear(
        self, weight: torch.Tensor, bias: torch.Tensor | None,
        source: QuantizedTensor | None = None, role: str = "",
    ) -> Linear:  # fmt: skip
        """`source`: the stored form `weight` was widened from; sbgemm reads it (same bits).
        `role` fixes the split plan (`plan.linear_splits`)."""
        splits = linear_splits(weight.shape[1], role)
        if self.linear_kernel == "sbgemm":
            return SbLinear(weight, bias, self.num_threads, source, splits)
        return TiledLinear(weight, bias, self.linear_tiles, splits)

    def rms_norm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
        if self.linear_kernel == "sbgemm":
            x = x.contiguous()
            out = torch.empty_like(x)
            sbrow.rms_norm(x, w.contiguous(), eps, out, self.num_threads)
            return out
        out = torch.empty_like(x)
        rowwise.rms_norm(x.numpy(), w.numpy(), eps, out.numpy())
        return out

    def add_rms_norm(self, x, residual, w, eps):
        """residual += x in place (it must be contiguous for the C kernel), out = norm(residual)."""
        if self.linear_kernel == "sbgemm":
            x = x.contiguous()
            out = torch.empty_like(x)
            sbrow.add_rms_norm(x, residual, w.contiguous(), eps, out, self.num_threads)
            return out, residual
        out = torch.empty_like(x)
        rowwise.add_rms_norm(x.numpy(), residual.numpy(), w.numpy(), eps, out.numpy())
        return out, residual

    def head_rms_norm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> None:
        rowwise.head_rms_norm(x.numpy(), w.numpy(), eps)

    def rope(self, x: torch.Tensor, batch: FlatBatch, cos: torch.Tensor, sin: torch.Tensor) -> None:
        rowwise.rope(x.numpy(), batch.positions, cos.numpy(), sin.numpy())

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        out = torch.empty((gate_up.shape[0], gate_up.shape[1] // 2), dtype=gate_up.dtype)
        if self.linear_kernel == "sbgemm":
            sbrow.silu_mul(gate_up.contiguous(), out, self.num_threads)
            return out
        rowwise.silu_mul(gate_up.numpy(), out.numpy())
        return out

    def gelu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """gelu_tanh(gate) * up (Gemma's GeGLU): sbrow.c's formula, or the numba fallback."""
        out = torch.empty((gate_up.shape[0], gate_up.shape[1] // 2), dtype=gate_up.dtype)
        if self.linear_kernel == "sbgemm":
            sbrow.gelu_mul(gate_up.contiguous(), out, self.num_threads)
            return out
        rowwise.gelu_mul(gate_up.numpy(), out.numpy())
        return out

    def prepare_batch(self, batch: FlatBatch) -> FlatBatch:
        """For the C attention: its tables and their addresses, once for all layers."""
        if self.attention_kernel != "sbattn":
            return batch
        tables = sbattn.attention_tables(batch.positions, batch.query_req, batch.block_tables)
        return dataclasses.replace(batch, attn=tables)

    def attention(
        self, q, k_cache, v_cache, batch: FlatBatch, scale: float, window: int = 0
    ) -> torch.Tensor:
        """The span definition over keys lo..t (lo = 0, or the sliding window's first key)."""
        out = torch.empty_like(q)
        if self.attention_kernel == "sbattn":
            tables = batch.attn if isinstance(batch.attn, sbattn.AttentionTables) else None
            sbattn.paged_attention(
                q, k_cache, v_cache, batch.positions, batch.query_req, batch.block_tables,
                batch.block_size, self.key_tile, scale, out, self.num_threads, tables,
                span=self.span, window=window,
            )  # fmt: skip
            return out
        cpu_attention.paged_attention(
            q.numpy(), k_cache.numpy(), v_cache.numpy(), batch.positions, batch.query_req,
            batch.block_tables, batch.block_size, self.key_tile, scale, out.numpy(), self.span,
            window,
        )  # fmt: skip
        return out


class FastOps(FastMoe, TorchPlacement):
    """Stock torch ops (MKL/oneDNN on CPU; cuBLAS and SDPA on CUDA). Correct, but reductions
    follow the library's shape-dependent choices; MoE layers as transformers computes them."""

    def __init__(self, device: str = "cpu", act_dtype: torch.dtype = torch.float32):
        self.device = torch.device(device)
        self.act_dtype = act_dtype

    def linear(self, weight, bias, source=None, role: str = "") -> Linear:
        weight = weight.to(device=self.device, dtype=self.act_dtype).contiguous()
        bias = None if bias is None else bias.to(device=self.device, dtype=self.act_dtype)
        if role in FLOAT32_ROLES:
            return lambda x: F.linear(x, weight, bias).float()
        return lambda x: F.linear(x, weight, bias)

    def _norm(self, x, w, eps):
        x = x.float()
        return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w).to(self.act_dtype)

    def rms_norm(self, x, w, eps):
        return self._norm(x, w, eps)

    def add_rms_norm(self, x, residual, w, eps):
        residual.add_(x)
        return self._norm(residual, w, eps), residual

    def head_rms_norm(self, x, w, eps) -> None:
        x.copy_(self._norm(x, w, eps))

    def rope(self, x, batch: FlatBatch, cos, sin) -> None:
        pos = batch.device_positions()
        c = cos[pos].unsqueeze(1)
        s = sin[pos].unsqueeze(1)
        half = x.shape[-1] // 2
        a, b = x[..., :half].float(), x[..., half:].float()
        lo, hi = a * c - b * s, b * c + a * s  # both before either write (a may alias x)
        x[..., :half] = lo
        x[..., half:] = hi

    def silu_mul(self, gate_up):
        inter = gate_up.shape[1] // 2
        return F.silu(gate_up[:, :inter]) * gate_up[:, inter:]

    def gelu_mul(self, gate_up):
        inter = gate_up.shape[1] // 2
        return F.gelu(gate_up[:, :inter], approximate="tanh") * gate_up[:, inter:]

    def attention(
        self, q, k_cache, v_cache, batch: FlatBatch, scale: float, window: int = 0
    ) -> torch.Tensor:
        """SDPA per request, planned on the host (`sdpa.causal_sdpa`: keys lo..t, `window` > 0
        masks keys below t - window + 1); a CUDA-graphed decode step (its batch carries the
        static program map in `attn`, see graphs/decode_buffers.py) runs the paged Triton
        kernel instead: SDPA has no paged decode a graph could replay."""
        if batch.attn is not None:
            from samebits.kernels.triton.attention import paged_attention

            return paged_attention(q, k_cache, v_cache, batch.attn, scale, window=window)
        out = torch.empty_like(q)
        group = q.shape[1] // k_cache.shape[1]
        for r in range(len(batch.seq_lens)):
            lo, hi = int(batch.query_start_loc[r]), int(batch.query_start_loc[r + 1])
            if lo == hi:
                continue
            slots = _request_slots(batch, r)
            k = k_cache[slots].repeat_interleave(group, 1).transpose(0, 1)
            v = v_cache[slots].repeat_interleave(group, 1).transpose(0, 1)
            qr = q[lo:hi].transpose(0, 1)
            o = causal_sdpa(qr, k, v, batch.positions[lo:hi], scale, window)
            out[lo:hi] = o.transpose(0, 1)
        return out


def _request_slots(batch: FlatBatch, r: int) -> torch.Tensor:
    n = int(batch.seq_lens[r])
    pos = torch.arange(n)
    table = torch.from_numpy(batch.block_tables[r])
    slots = table[pos // batch.block_size] * batch.block_size + pos % batch.block_size
    return slots.to(batch.slot_mapping.device)


def invariant_ops(plan) -> InvariantOps:
    """The cpu/invariant op set of `plan`."""
    return InvariantOps(
        plan.linear_tiles, plan.attention_key_tile, plan.linear_kernel, plan.num_threads,
        plan.attention_kernel, plan.attention_span,
    )  # fmt: skip


def fast_ops(plan) -> FastOps:
    """The stock-torch op set of `plan` (cpu/fast and cuda/fast)."""
    return FastOps(plan.device, getattr(torch, plan.dtype))
