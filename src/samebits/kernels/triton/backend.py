"""The CUDA invariant op set: `TritonOps` (cuda/invariant in `samebits.kernels.registry`), its
start-up qualification probe and the fingerprinted list of linear specializations. The
stock-torch negative control (cuda/fast: cuBLAS, SDPA) is `samebits.kernels.cpu.ops.FastOps`
on the CUDA device; the GPU plans' fields are `samebits.kernels.triton.plan`'s.

Invariant of `TritonOps`: every op's output row is a function of the row's inputs and its
logical position only; linears follow the split plan of their weight (N, K, role), attention
iterates key tiles aligned to absolute positions (see the kernel modules).
"""

from __future__ import annotations

import dataclasses
import logging

import torch

from samebits.kernels.interface import FLOAT32_ROLES
from samebits.kernels.metadata import FlatBatch
from samebits.kernels.moe import InvariantMoe
from samebits.kernels.placement import TorchPlacement
from samebits.kernels.plan import KernelPlan
from samebits.kernels.triton import attention as triton_attention
from samebits.kernels.triton import moe_router, rows
from samebits.kernels.triton.certified.units import fused_key, qkv_store_key
from samebits.kernels.triton.launches import M_PROBES
from samebits.kernels.triton.linear import TritonLinear, choose_launch
from samebits.kernels.triton.moe_grouped import GroupedExperts, combine, grouped_outputs

QUALIFY_ROWS = (1, 3, 16, 64, 200, 1100)  # one M per launch-table row
log = logging.getLogger(__name__)


class QualifiedLinear(TritonLinear):
    """A TritonLinear with its start-up probe: row 0 of random inputs must have the same bits
    at every M of QUALIFY_ROWS (each M picks its own launch: split-K grid or in-program
    ranges, its own tile sizes). Evidence class: qualification, on this GPU."""

    def qualify(self) -> bool:
        gen = torch.Generator(device=self.weight.device).manual_seed(0)
        x = torch.randn(
            (max(QUALIFY_ROWS), self.shape[1]), generator=gen, device=self.weight.device
        ).to(self.weight.dtype)
        ref = self(x[:1])[0].contiguous().view(torch.uint8)
        return all(
            torch.equal(self(x[:m].contiguous())[0].contiguous().view(torch.uint8), ref)
            for m in QUALIFY_ROWS
        )


class TritonOps(InvariantMoe, TorchPlacement):
    """The GPU invariant plan: Triton kernels, bfloat16 activations and KV cache, float32
    residual stream, logits and MoE router logits; MoE routing and combine by
    `samebits.kernels.moe.InvariantMoe` over these kernels."""

    def __init__(self, plan: KernelPlan):
        self.device = torch.device("cuda")
        self.act_dtype = getattr(torch, plan.dtype)
        self.group = plan.group
        self.span = plan.attention_span
        self.op_by_op = frozenset(plan.op_by_op)  # fused units without a certificate

    def linear(self, weight, bias, source=None, role: str = "") -> QualifiedLinear:
        w = weight.to(device=self.device, dtype=self.act_dtype).contiguous()
        b = None if bias is None else bias.to(device=self.device, dtype=torch.float32)
        out = torch.float32 if role in FLOAT32_ROLES else self.act_dtype
        return QualifiedLinear(w, b, role, out)

    def moe_route(self, logits, top_k: int, normalize: bool):
        """Softmax, top-k and renormalization in one launch (`moe_router`): the bits of
        `InvariantMoe.moe_route`."""
        return moe_router.route(logits, top_k, normalize)

    def moe_group(self, experts):
        """The experts with stacked weights for the grouped launch (`moe_grouped`)."""
        return GroupedExperts(experts)

    def moe_experts(self, x, ids, weights, experts):
        """Grouped experts: two grouped launches (gate_up, down) over all experts, no host
        sync, on and off CUDA-graph capture (the per-expert path's bits: `moe_grouped`);
        combined by one kernel in rank order in float32 (`InvariantMoe`'s bits)."""
        if not isinstance(experts, GroupedExperts):
            if not getattr(self, "_warned_ungrouped", False):
                self._warned_ungrouped = True
                log.warning("MoE experts not grouped (`moe_group` was not called): the "
                            "per-expert path runs (the same bits, one launch per expert)")  # fmt: skip
            return super().moe_experts(x, ids, weights, experts)
        outputs = grouped_outputs(x, ids, experts, self.silu_mul)
        return combine(outputs, weights, self.act_dtype)

    def rms_norm(self, x, w, eps):
        return rows.rms_norm(x, w, eps, self.act_dtype)

    def add_rms_norm(self, x, residual, w, eps):
        return rows.add_rms_norm(x, residual, w, eps, self.act_dtype), residual

    def linear_add_rms_norm(self, linear, x, residual, w, eps):
        """Where M's launch is the split-K grid (S > 1, decode-sized M), the ordered sum of its
        partials is fused with the residual add and RMSNorm (`rows.sum_add_rms_norm`, one
        launch instead of two); elsewhere, and where the fused unit has no certificate
        (`plan.op_by_op`), op by op. The same bits either way."""
        partials = None
        fusable = isinstance(linear, TritonLinear) and linear.out_dtype == self.act_dtype
        if fusable and not (self.op_by_op and self._unfused(linear)):
            partials = linear.grid_partials(x)
        if partials is None:
            return super().linear_add_rms_norm(linear, x, residual, w, eps)
        out = rows.sum_add_rms_norm(partials, linear.bias, residual, w, eps, self.act_dtype)
        return out, residual

    def _unfused(self, linear: TritonLinear) -> bool:
        n, k = linear.shape
        return fused_key(linear.role, n, k, linear.bias is not None) in self.op_by_op

    def head_rms_norm(self, x, w, eps) -> None:
        rows.head_rms_norm(x, w, eps)

    def rope(self, x, batch: FlatBatch, cos, sin) -> None:
        rows.rope(x, batch.device_positions(), cos, sin)

    def qkv_rope_store(self, qkv, batch: FlatBatch, cos, sin, kv, layer: int, heads: int,
                       kv_heads: int, head_dim: int, norms=None) -> torch.Tensor:  # fmt: skip
        """Without q/k norms one kernel per layer (`rows.qkv_rope_store`); with them, or where
        the fused unit has no certificate (`plan.op_by_op`), op by op: the same bits either way."""
        unfused = self.op_by_op and qkv_store_key(heads, kv_heads, head_dim) in self.op_by_op
        if norms is not None or unfused:
            args = (qkv, batch, cos, sin, kv, layer, heads, kv_heads, head_dim, norms)
            return super().qkv_rope_store(*args)
        return rows.qkv_rope_store(
            qkv, batch.device_positions(), batch.slot_mapping, cos, sin, kv.k[layer],
            kv.v[layer], heads,
        )  # fmt: skip

    def silu_mul(self, gate_up):
        return rows.silu_mul(gate_up)

    def gelu_mul(self, gate_up):
        return rows.gelu_mul(gate_up)

    def prepare_batch(self, batch: FlatBatch) -> FlatBatch:
        meta = triton_attention.attention_metadata(
            batch.positions, batch.query_start_loc, batch.block_tables, batch.block_size,
            self.group, self.device, span=self.span,
        )  # fmt: skip
        return dataclasses.replace(batch, attn=meta)

    def attention(
        self, q, k_cache, v_cache, batch: FlatBatch, scale: float, window: int = 0
    ) -> torch.Tensor:
        return triton_attention.paged_attention(q, k_cache, v_cache, batch.attn, scale, window)


def linear_specializations(shapes: list[tuple[str, int, int]]) -> list[str]:
    """The launches the plan may compile for each (role, N, K), one line each (for the
    fingerprint and `samebits info`): the split plan and every launch M may select."""
    from samebits.kernels.triton.linear import split_plan

    lines = []
    for role, n, k in shapes:
        plan = split_plan(n, k, role)
        launches = sorted({choose_launch(plan, m) for m in M_PROBES}, key=repr)
        lines.append(f"{role}[{n}x{k}] {plan} -> {launches}")
    return lines
