"""One decoder for the Llama family: Llama 2/3, SmolLM2, Mistral, Qwen2 (qkv bias), Qwen3
(q/k RMSNorm), and the mixtures of experts Qwen3-MoE and Mixtral (their sparse layers are
`samebits.model.moe.MoeBlock`s). Every op runs through the KernelPlan's op set; the model holds
no runtime state besides the paged KV cache it is handed."""

from __future__ import annotations

import torch

from samebits.kernels.interface import KVCache, default_scale
from samebits.kernels.metadata import FlatBatch
from samebits.kernels.plan import KernelPlan
from samebits.kernels.quantized import QuantizedTensor
from samebits.kernels.registry import make_ops
from samebits.model.moe import MoeBlock
from samebits.model.rope_tables import rope_tables

__all__ = ["DecoderModel", "KVCache"]


class _Layer:
    """One decoder layer: attention, then a dense MLP (`gate_up`, `down`) or, in a sparse
    layer of a MoE model, a `MoeBlock` (`moe`; `gate_up` and `down` are None)."""

    def __init__(self, ops, cfg, w: dict[str, torch.Tensor], blocks: dict, prefix: str,
                 sparse: bool = False, release: bool = False):  # fmt: skip
        attn = f"{prefix}.self_attn"

        def linear(role: str, parts: list[str], bias: torch.Tensor | None = None):
            names = [f"{prefix}.{p}.weight" for p in parts]
            weight = torch.cat([w[n] for n in names]) if len(names) > 1 else w[names[0]]
            source = QuantizedTensor.concat([blocks.get(n) for n in names])
            return ops.linear(weight, bias, source, role=role)

        bias = None
        if cfg.attention_bias:
            bias = ops.weight(torch.cat([w[f"{attn}.{p}_proj.bias"] for p in "qkv"]))
        self.qkv = linear("qkv", [f"self_attn.{p}_proj" for p in "qkv"], bias)
        self.o = linear("o", ["self_attn.o_proj"])
        self.moe = MoeBlock(ops, cfg, w, blocks, prefix, release) if sparse else None
        self.gate_up = None if sparse else linear("gate_up", ["mlp.gate_proj", "mlp.up_proj"])
        self.down = None if sparse else linear("down", ["mlp.down_proj"])
        self.ln1 = ops.weight(w[f"{prefix}.input_layernorm.weight"])
        self.ln2 = ops.weight(w[f"{prefix}.post_attention_layernorm.weight"])
        self.q_norm = _optional(ops, w.get(f"{attn}.q_norm.weight"))
        self.k_norm = _optional(ops, w.get(f"{attn}.k_norm.weight"))


def _optional(ops, t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else ops.weight(t)


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
        release_sources: bool = False, quantized: dict[str, QuantizedTensor] | None = None,
        ops=None,
    ):  # fmt: skip
        """`quantized`: stored forms (quantized blocks, 16-bit values) by weight name that linear
        kernels may read instead of the float32 weight (same bits). `release_sources` pops each projection weight (and
        its stored form) from `weights` / `quantized` once its layer holds the kernel's own copy
        (peak memory ~ one copy of the weights; the caller owns them). `ops`: the op set
        (default: the plan's; a tensor-parallel rank passes its sharding one)."""
        self.cfg = cfg
        self.plan = plan
        self.ops = ops if ops is not None else make_ops(plan)
        blocks = quantized if quantized is not None else {}
        self.embed = self.ops.embedding(weights["model.embed_tokens.weight"])
        self.layers = []
        for i in range(cfg.num_hidden_layers):
            prefix = f"model.layers.{i}"
            sparse = cfg.is_sparse(i)
            self.layers.append(
                _Layer(self.ops, cfg, weights, blocks, prefix, sparse, release_sources)
            )
            if release_sources:
                for name in _PROJECTIONS:
                    weights.pop(f"{prefix}.{name}.weight", None)
                    blocks.pop(f"{prefix}.{name}.weight", None)
        self.norm = self.ops.weight(weights["model.norm.weight"])
        head_name = "lm_head.weight" if "lm_head.weight" in weights else "model.embed_tokens.weight"
        self.lm_head = self.ops.linear(
            weights[head_name], None, blocks.get(head_name), role="lm_head"
        )
        if release_sources:
            blocks.pop(head_name, None)
        cos, sin = rope_tables(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling, max_positions)
        self.cos, self.sin = self.ops.weight(cos), self.ops.weight(sin)
        self.scale = default_scale(cfg.head_dim)

    def role_linears(self) -> list[tuple[str, object]]:
        """(role, linear) per distinct weight kind: qkv, o; gate_up, down of the first dense
        layer; router, gate_up, down of the first sparse layer's expert 0; lm_head."""
        first = self.layers[0]
        out: list[tuple[str, object]] = [("qkv", first.qkv), ("o", first.o)]
        dense = next((layer for layer in self.layers if layer.moe is None), None)
        if dense is not None:
            out += [("gate_up", dense.gate_up), ("down", dense.down)]
        sparse = next((layer for layer in self.layers if layer.moe is not None), None)
        if sparse is not None:
            out += sparse.moe.linears()
        return out + [("lm_head", self.lm_head)]

    def linears(self) -> list:
        """One linear per distinct weight shape (for qualification)."""
        return [lin for _, lin in self.role_linears()]

    def new_kv_cache(self, num_slots: int) -> KVCache:
        cfg = self.cfg
        return self.ops.new_kv_cache(
            cfg.num_hidden_layers, num_slots, cfg.num_key_value_heads, cfg.head_dim
        )

    @torch.inference_mode()
    def forward(self, batch: FlatBatch, kv: KVCache) -> torch.Tensor:
        """float32 logits [len(batch.logits_indices), vocab] on the plan's device."""
        self.plan.apply_threads()
        if batch.attn is None:  # a decode graph's batch carries its static metadata
            batch = self.ops.prepare_batch(batch)
        eps = self.cfg.rms_norm_eps
        residual = self.embed.index_select(0, batch.input_ids).float().contiguous()
        x = self.ops.rms_norm(residual, self.layers[0].ln1, eps)
        fused = self._fused_layers(kv)
        if fused is not None:  # the same kernels in one C call per layer (same bits)
            mlp = fused.run(x, residual, batch)
        for i, layer in enumerate(self.layers if fused is None else ()):
            attn = self._attention(layer, x, batch, kv, i)
            x, residual = self.ops.linear_add_rms_norm(layer.o, attn, residual, layer.ln2, eps)
            nxt = self.layers[i + 1].ln1 if i + 1 < len(self.layers) else None
            if layer.moe is not None:
                mlp = layer.moe(x)
                if nxt is not None:
                    x, residual = self.ops.add_rms_norm(mlp, residual, nxt, eps)
                continue
            act = self.ops.silu_mul(layer.gate_up(x))
            if nxt is not None:
                x, residual = self.ops.linear_add_rms_norm(layer.down, act, residual, nxt, eps)
            else:
                mlp = layer.down(act)
        rows = batch.logits_indices
        last = self.ops.add_rms_norm(
            mlp.index_select(0, rows).contiguous(),
            residual.index_select(0, rows).contiguous(),
            self.norm,
            eps,
        )[0]
        return self.lm_head(last)

    fuse_layers = True  # sblayer.c where it covers the model (tests switch it off)

    def _fused_layers(self, kv: KVCache):
        """The layers as one C call each (`kernels/cpu/sblayer.py`) for this KV cache, or
        None (op by op): built once per cache."""
        if not self.fuse_layers or self.ops.device.type != "cpu":
            return None
        cached = getattr(self, "_fused", None)
        if cached is None or cached[0] is not kv:
            from samebits.kernels.cpu.sblayer import FusedLayers

            cached = (kv, FusedLayers.build(self, kv))
            self._fused = cached
        return cached[1]

    def _attention(self, layer: _Layer, x, batch: FlatBatch, kv: KVCache, i: int) -> torch.Tensor:
        """q/k/v from x, [q/k norms,] RoPE, K/V stored in layer i's cache (the op set's
        `qkv_rope_store`, fused on the GPU plan without q/k norms), then attention."""
        cfg, ops = self.cfg, self.ops
        shape = (cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim)
        norms = None if layer.q_norm is None else (layer.q_norm, layer.k_norm, cfg.rms_norm_eps)
        q = ops.qkv_rope_store(layer.qkv(x), batch, self.cos, self.sin, kv, i, *shape, norms)
        out = ops.attention(q, kv.k[i], kv.v[i], batch, self.scale)
        return out.reshape(x.shape[0], cfg.num_attention_heads * cfg.head_dim)
