"""The Gemma 3 text decoder (`gemma3_text`, and the text part of `gemma3` checkpoints) over
the plan's op set, built from the llama decoder's layers (`samebits.model.llama`).

Per layer (transformers' Gemma3DecoderLayer; every norm an RMSNorm with weight 1 + w):
    x = input_norm(residual); a = post_attention_norm(o(attention(x)))
    residual += a; x = pre_feedforward_norm(residual)
    m = post_feedforward_norm(down(gelu_tanh(gate(x)) * up(x))); residual += m
attention with q/k norms, scale `query_pre_attn_scalar ** -0.5`, and per layer either a
sliding window (keys max(0, t - W + 1)..t, RoPE base `rope_local_theta`) or full attention
(keys 0..t, the model's RoPE and scaling). The residual stream starts as the embedding row
times sqrt(hidden_size), the scale rounded to the embedding table's dtype and the product
taken in that dtype (transformers' Gemma3TextScaledWordEmbedding). The lm_head is the
(tied) embedding; logits are soft-capped (`tanh(z / c) * c`) when the config sets a cap.
Invariant: as `DecoderModel`'s — with an invariant plan a logits row depends only on its
request's tokens 0..t (each op is row-local, attention follows the span definition with the
window inside it).
"""

from __future__ import annotations

import math

import torch

from samebits.kernels.interface import KVCache
from samebits.kernels.metadata import FlatBatch
from samebits.kernels.plan import KernelPlan
from samebits.kernels.quantized import QuantizedTensor
from samebits.model.llama import DecoderModel, _Layer
from samebits.model.rope_tables import rope_tables

__all__ = ["Gemma3Model", "shifted_norms"]

_LAYER_NORMS = (
    "input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
    "post_feedforward_layernorm", "self_attn.q_norm", "self_attn.k_norm",
)  # fmt: skip


def shifted_norms(cfg, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A shallow copy of `weights` whose RMSNorm weights are 1 + w (float32, transformers'
    `1.0 + weight.float()`), so the op sets' plain RMSNorm computes Gemma's."""
    out = dict(weights)
    names = ["model.norm.weight"] + [
        f"model.layers.{i}.{n}.weight" for i in range(cfg.num_hidden_layers) for n in _LAYER_NORMS
    ]
    for name in names:
        out[name] = 1.0 + weights[name].float()
    return out


class Gemma3Model(DecoderModel):
    """forward(batch, kv) -> float32 logits for `batch.logits_indices` rows (module doc)."""

    fuse_layers = False  # sblayer.c computes llama's layer, not Gemma's

    def __init__(
        self, cfg, weights: dict[str, torch.Tensor], plan: KernelPlan, max_positions: int,
        release_sources: bool = False, quantized: dict[str, QuantizedTensor] | None = None,
    ):  # fmt: skip
        if cfg.gemma3 is None:
            raise ValueError(f"Gemma3Model needs a gemma3_text config, got {cfg.model_type!r}")
        shifted = shifted_norms(cfg, weights)
        super().__init__(cfg, shifted, plan, max_positions, release_sources, quantized)
        if release_sources:  # the projections the layers took: drop the caller's copies too
            for name in [n for n in weights if n not in shifted]:
                weights.pop(name)
        gemma = cfg.gemma3
        self.ff_norms = [
            tuple(
                self.ops.weight(shifted[f"model.layers.{i}.{n}_feedforward_layernorm.weight"])
                for n in ("pre", "post")
            )
            for i in range(cfg.num_hidden_layers)
        ]
        cos, sin = rope_tables(cfg.head_dim, gemma.rope_local_theta, None, max_positions)
        self.local_cos, self.local_sin = self.ops.weight(cos), self.ops.weight(sin)
        self.scale = gemma.scale
        table = self.embed
        self.embed_scale = torch.tensor(math.sqrt(cfg.hidden_size)).to(table.dtype).to(table.device)

    def _fused_layers(self, kv: KVCache):
        return None

    @torch.inference_mode()
    def forward(self, batch: FlatBatch, kv: KVCache) -> torch.Tensor:
        """float32 logits [len(batch.logits_indices), vocab] on the plan's device."""
        self.plan.apply_threads()
        if batch.attn is None:  # a decode graph's batch carries its static metadata
            batch = self.ops.prepare_batch(batch)
        ops, eps = self.ops, self.cfg.rms_norm_eps
        rows = self.embed.index_select(0, batch.input_ids) * self.embed_scale
        residual = rows.float().contiguous()
        x = ops.rms_norm(residual, self.layers[0].ln1, eps)
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            attn = ops.rms_norm(layer.o(self._attention(layer, x, batch, kv, i)), layer.ln2, eps)
            pre, post = self.ff_norms[i]
            x, residual = ops.add_rms_norm(attn, residual, pre, eps)
            if i == last:  # only the rows that give logits from here on
                x = x.index_select(0, batch.logits_indices).contiguous()
                residual = residual.index_select(0, batch.logits_indices).contiguous()
            mlp = ops.rms_norm(layer.down(ops.gelu_mul(layer.gate_up(x))), post, eps)
            nxt = self.layers[i + 1].ln1 if i < last else self.norm
            x, residual = ops.add_rms_norm(mlp, residual, nxt, eps)
        return self._soft_cap(self.lm_head(x))

    def _soft_cap(self, logits: torch.Tensor) -> torch.Tensor:
        """tanh(z / cap) * cap elementwise when the config sets `final_logit_softcapping`."""
        cap = self.cfg.gemma3.final_logit_softcapping
        if cap is None:
            return logits
        return torch.tanh(logits / cap) * cap

    def _attention(self, layer: _Layer, x, batch: FlatBatch, kv: KVCache, i: int) -> torch.Tensor:
        """q/k/v, q/k norms, RoPE of the layer's kind, K/V stored, then attention over the
        layer's window (0: all keys)."""
        cfg, ops = self.cfg, self.ops
        window = cfg.gemma3.window(i)
        cos, sin = (self.local_cos, self.local_sin) if window else (self.cos, self.sin)
        shape = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
        norms = (layer.q_norm, layer.k_norm, cfg.rms_norm_eps)
        q = ops.qkv_rope_store(layer.qkv(x), batch, cos, sin, kv, i, *shape, norms)
        out = ops.attention(q, kv.k[i], kv.v[i], batch, self.scale, window=window)
        return out.reshape(x.shape[0], cfg.num_attention_heads * cfg.head_dim)
