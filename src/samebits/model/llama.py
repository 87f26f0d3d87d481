"""One decoder for the Llama family: Llama 2/3, SmolLM2, Mistral, Qwen2 (qkv bias), Qwen3
(q/k RMSNorm). Every op runs through the KernelPlan's op set; the model holds no runtime state
besides the paged KV cache it is handed."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from samebits.kernels.metadata import FlatBatch
from samebits.kernels.ops import default_scale
from samebits.kernels.plan import KernelPlan
from samebits.model.rope_tables import rope_tables


@dataclass
class KVCache:
    """Per-layer K and V slot arrays: [num_slots, num_kv_heads, head_dim] float32."""

    k: list[torch.Tensor]
    v: list[torch.Tensor]


class _Layer:
    def __init__(self, ops, cfg, w: dict[str, torch.Tensor], prefix: str, release: bool):
        attn, mlp = f"{prefix}.self_attn", f"{prefix}.mlp"
        qkv = torch.cat([w[f"{attn}.{p}_proj.weight"] for p in "qkv"])
        bias = None
        if cfg.attention_bias:
            bias = torch.cat([w[f"{attn}.{p}_proj.bias"] for p in "qkv"])
        self.qkv = ops.linear(qkv, bias)
        self.o = ops.linear(w[f"{attn}.o_proj.weight"], None)
        gate_up = torch.cat([w[f"{mlp}.gate_proj.weight"], w[f"{mlp}.up_proj.weight"]])
        self.gate_up = ops.linear(gate_up, None)
        self.down = ops.linear(w[f"{mlp}.down_proj.weight"], None)
        self.ln1 = w[f"{prefix}.input_layernorm.weight"]
        self.ln2 = w[f"{prefix}.post_attention_layernorm.weight"]
        self.q_norm = w.get(f"{attn}.q_norm.weight")
        self.k_norm = w.get(f"{attn}.k_norm.weight")
        if release:
            for name in _PROJECTIONS:
                w.pop(f"{prefix}.{name}.weight", None)


_PROJECTIONS = tuple(f"self_attn.{p}_proj" for p in "qkvo") + tuple(
    f"mlp.{p}_proj" for p in ("gate", "up", "down")
)


class DecoderModel:
    """forward(batch, kv) -> float32 logits for `batch.logits_indices` rows.

    Invariant: with an invariant plan, the logits row of a token is a function of the token
    ids at positions 0..t of its request only (given the K/V in its slots came from the same
    history), regardless of the other rows in the batch.
    """

    def __init__(
        self, cfg, weights: dict[str, torch.Tensor], plan: KernelPlan, max_positions: int,
        release_sources: bool = False,
    ):  # fmt: skip
        """`release_sources` pops each projection weight from `weights` once its layer holds
        the kernel's own copy (peak memory ~ one copy of the weights; the caller owns them)."""
        self.cfg = cfg
        self.plan = plan
        self.ops = plan.make_ops()
        self.embed = weights["model.embed_tokens.weight"]
        self.layers = [
            _Layer(self.ops, cfg, weights, f"model.layers.{i}", release_sources)
            for i in range(cfg.num_hidden_layers)
        ]
        self.norm = weights["model.norm.weight"]
        head = weights.get("lm_head.weight", self.embed)
        self.lm_head = self.ops.linear(head, None)
        self.cos, self.sin = rope_tables(
            cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, max_positions
        )
        self.scale = default_scale(cfg.head_dim)

    def linears(self) -> list:
        """One linear per distinct weight shape (for qualification)."""
        first = self.layers[0]
        return [first.qkv, first.o, first.gate_up, first.down, self.lm_head]

    def new_kv_cache(self, num_slots: int) -> KVCache:
        shape = (num_slots, self.cfg.num_key_value_heads, self.cfg.head_dim)
        n = self.cfg.num_hidden_layers
        return KVCache(
            [torch.zeros(shape) for _ in range(n)], [torch.zeros(shape) for _ in range(n)]
        )

    @torch.inference_mode()
    def forward(self, batch: FlatBatch, kv: KVCache) -> torch.Tensor:
        eps = self.cfg.rms_norm_eps
        residual = self.embed.index_select(0, batch.input_ids).contiguous()
        x = self.ops.rms_norm(residual, self.layers[0].ln1, eps)
        for i, layer in enumerate(self.layers):
            attn = self._attention(layer, x, batch, kv.k[i], kv.v[i])
            x, residual = self.ops.add_rms_norm(layer.o(attn), residual, layer.ln2, eps)
            mlp = layer.down(self.ops.silu_mul(layer.gate_up(x)))
            nxt = self.layers[i + 1].ln1 if i + 1 < len(self.layers) else None
            if nxt is not None:
                x, residual = self.ops.add_rms_norm(mlp, residual, nxt, eps)
        rows = batch.logits_indices
        last = self.ops.add_rms_norm(
            mlp.index_select(0, rows).contiguous(),
            residual.index_select(0, rows).contiguous(),
            self.norm,
            eps,
        )[0]
        return self.lm_head(last)

    def _attention(self, layer: _Layer, x, batch: FlatBatch, k_cache, v_cache) -> torch.Tensor:
        cfg = self.cfg
        n, hd, kvd = (
            x.shape[0],
            cfg.num_attention_heads * cfg.head_dim,
            cfg.num_key_value_heads * cfg.head_dim,
        )
        qkv = layer.qkv(x)
        q = qkv[:, :hd].reshape(n, cfg.num_attention_heads, cfg.head_dim).contiguous()
        k = qkv[:, hd : hd + kvd].reshape(n, cfg.num_key_value_heads, cfg.head_dim).contiguous()
        v = qkv[:, hd + kvd :].reshape(n, cfg.num_key_value_heads, cfg.head_dim)
        if layer.q_norm is not None:
            self.ops.head_rms_norm(q, layer.q_norm, cfg.rms_norm_eps)
            self.ops.head_rms_norm(k, layer.k_norm, cfg.rms_norm_eps)
        self.ops.rope(q, batch.positions, self.cos, self.sin)
        self.ops.rope(k, batch.positions, self.cos, self.sin)
        k_cache.index_copy_(0, batch.slot_mapping, k)
        v_cache.index_copy_(0, batch.slot_mapping, v)
        out = self.ops.attention(q, k_cache, v_cache, batch, self.scale)
        return out.reshape(n, hd)
