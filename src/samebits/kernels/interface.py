"""The op-set interface every backend implements: the `Ops` protocol, the KV cache, the linear
callable (`samebits.kernels.registry` maps (device, plan) to the factory of an op set).

The decoder (`samebits.model.llama`) calls only the methods of `Ops`; adding a backend means
adding a factory to the registry's table, never changing the model. A factory receives the
built `KernelPlan` (static facts only) and returns the op set. This module imports nothing
from the rest of `samebits.kernels` at runtime (the bottom layer of the package).

Invariant of an op set registered under plan name "invariant": every output row of every op
is a function of that row's inputs and its logical position only (never of the other rows in
the batch, the number of query tokens of a chunk, or where KV pages sit in memory).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

# Key span of attention (DESIGN.md §2b): the keys of a query are cut into spans at absolute
# positions 0, S, 2S, ...; each span is an online softmax from a fresh state and the spans are
# merged in span order by one merge formula, whichever launch (sequential spans or split-KV)
# runs. Part of the numerics of every plan, so it is in the fingerprint (`KernelPlan.to_dict`).
ATTENTION_SPAN = 512

if TYPE_CHECKING:
    from samebits.kernels.metadata import FlatBatch
    from samebits.kernels.quantized import QuantizedTensor

Linear = Callable[[torch.Tensor], torch.Tensor]
Expert = tuple[Linear, Linear]  # one expert of a MoE layer: (gate_up, down)
LINEAR_ROLES = ("qkv", "o", "gate_up", "down", "lm_head", "router")
FLOAT32_ROLES = ("lm_head", "router")  # linears whose output is float32 in every op set


@dataclass
class KVCache:
    """Per-layer K and V slot arrays: [num_slots, num_kv_heads, head_dim] in the op set's
    cache dtype, on its device. Slot `s` of block `b` is `b * block_size + offset`."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]


class Ops(Protocol):
    """What the decoder needs from a backend. Activations between ops are `act_dtype` on
    `device`; the residual stream is float32; logits are float32."""

    device: torch.device
    act_dtype: torch.dtype

    def weight(self, t: torch.Tensor) -> torch.Tensor:
        """A small parameter (norm weights, RoPE tables, biases) placed for the kernels."""

    def embedding(self, table: torch.Tensor) -> torch.Tensor:
        """The embedding table placed for `index_select` (rows are copied, never summed)."""

    def linear(
        self, weight: torch.Tensor, bias: torch.Tensor | None,
        source: QuantizedTensor | None = None, role: str = "",
    ) -> Linear:  # fmt: skip
        """y = x @ weight.T + bias. `role` is one of LINEAR_ROLES (fixes the split plan and,
        for "lm_head" and "router" (a MoE layer's router logits), a float32 output)."""

    def rms_norm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor: ...

    def add_rms_norm(
        self, x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """residual += x in place; returns (norm(residual), residual)."""

    def linear_add_rms_norm(
        self, linear: Linear, x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
        eps: float,
    ) -> tuple[torch.Tensor, torch.Tensor]:  # fmt: skip
        """``add_rms_norm(linear(x), residual, w, eps)``: the same bits as those two ops (an
        op set may fuse the linear's last step with the norm)."""

    def head_rms_norm(self, x: torch.Tensor, w: torch.Tensor, eps: float) -> None: ...

    def rope(self, x: torch.Tensor, batch: FlatBatch, cos, sin) -> None: ...

    def silu_mul(self, gate_up: torch.Tensor) -> torch.Tensor: ...

    def gelu_mul(self, gate_up: torch.Tensor) -> torch.Tensor:
        """``gelu_tanh(gate_up[:, :I]) * gate_up[:, I:]`` (Gemma's GeGLU, transformers'
        gelu_pytorch_tanh), row-local in an invariant op set."""

    def new_kv_cache(self, layers: int, slots: int, kv_heads: int, head_dim: int) -> KVCache: ...

    def store_kv(self, kv: KVCache, layer: int, batch: FlatBatch, k, v) -> None: ...

    def qkv_rope_store(
        self, qkv: torch.Tensor, batch: FlatBatch, cos, sin, kv: KVCache, layer: int,
        heads: int, kv_heads: int, head_dim: int, norms: tuple | None = None,
    ) -> torch.Tensor:  # fmt: skip
        """The attention input of a layer: split ``qkv [n, (heads + 2 * kv_heads) *
        head_dim]``, with ``norms = (q_norm, k_norm, eps)`` (Qwen3) ``head_rms_norm`` of q and
        k, RoPE q and k, store k and v at ``batch.slot_mapping`` of layer ``layer``'s cache;
        returns q ``[n, heads, head_dim]`` contiguous. The same bits as those ops one by one
        (an op set may fuse them)."""

    def prepare_batch(self, batch: FlatBatch) -> FlatBatch:
        """Per-forward metadata (e.g. attention tile maps), computed once for all layers."""

    def attention(
        self, q, k_cache, v_cache, batch: FlatBatch, scale: float, window: int = 0
    ) -> torch.Tensor:
        """Paged causal attention of each query over its request's keys lo..t (absolute
        positions): lo = 0, or with a sliding `window` > 0, lo = max(0, t - window + 1).
        Invariant plans define it inside the span definition (DESIGN.md §2b)."""

    def moe_route(
        self, logits: torch.Tensor, top_k: int, normalize: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A MoE layer's routing from float32 router logits [n, E]: (expert ids int64 [n, k],
        largest first, float32 weights [n, k]); `normalize` renormalizes the k weights to sum
        to 1. Row-local in an invariant op set (ties to the lower expert id:
        `samebits.kernels.moe`)."""

    def moe_group(self, experts: Sequence[Expert]) -> Sequence[Expert]:
        """A MoE layer's experts in the form this op set's `moe_experts` takes (the GPU
        invariant plan stacks their weights for its grouped launch; the bits are the same)."""

    def moe_experts(
        self, x: torch.Tensor, ids: torch.Tensor, weights: torch.Tensor,
        experts: Sequence[Expert],
    ) -> torch.Tensor:  # fmt: skip
        """``sum_r weights[t, r] * experts[ids[t, r]](x[t])`` for every row t, in the
        activation dtype (an expert: ``down(silu_mul(gate_up(.)))``). In an invariant op set
        each expert's rows use its row-invariant linears and the k terms are added in rank
        order in float32, whatever the number of tokens routed to each expert."""


def default_scale(head_dim: int) -> float:
    """The attention scale the decoder passes to `Ops.attention`: 1 / sqrt(head_dim)."""
    return 1.0 / math.sqrt(head_dim)
