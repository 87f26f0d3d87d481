"""Gemma 3 text models: what their config adds to a llama-family `ModelConfig`, parsed from a
HF `config.json` (`gemma3_text`, or the `text_config` of a multimodal `gemma3` checkpoint),
and the checkpoint names of a `gemma3` folder's text part.

A Gemma 3 decoder (`samebits.model.gemma3.Gemma3Model`) differs from llama's by: GeGLU
(gelu_pytorch_tanh), the embedding scaled by sqrt(hidden_size) (the scale rounded to the
embedding's dtype, as transformers does), RMSNorms with (1 + w) weights, norms after attention
and after the MLP as well as before both, q/k norms, the attention scale
`query_pre_attn_scalar ** -0.5`, and interleaved sliding-window / global layers: a sliding
layer's query at position t sees keys max(0, t - sliding_window + 1) .. t (transformers'
`kv_idx > q_idx - sliding_window`) with RoPE of base `rope_local_theta`; a global layer sees
keys 0..t with the model's `rope_theta` and `rope_scaling`. No torch here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SLIDING, FULL = "sliding_attention", "full_attention"
GEMMA3_MODEL_TYPES = ("gemma3_text", "gemma3")
DEFAULT_SLIDING_PATTERN = 6  # transformers' default: every 6th layer global
DEFAULT_LOCAL_THETA = 10000.0
DEFAULT_GLOBAL_THETA = 1000000.0
# Multimodal checkpoints: text weights under these prefixes (transformers 5, then the older
# layout), everything else (vision tower, projector) is not part of the text model.
_TEXT_PREFIXES = (("model.language_model.", "model."), ("language_model.model.", "model."))
_TEXT_HEADS = ("lm_head.weight", "language_model.lm_head.weight")


@dataclass(frozen=True)
class Gemma3Attention:
    """The Gemma 3 parts of a `ModelConfig` (its field `gemma3`).

    Invariants: `layer_types` has one entry per decoder layer, each SLIDING or FULL;
    `sliding_window >= 1`; `query_pre_attn_scalar > 0`; `rope_local_theta > 0`;
    `final_logit_softcapping` None or > 0.
    """

    layer_types: tuple[str, ...]
    sliding_window: int
    query_pre_attn_scalar: float
    rope_local_theta: float = DEFAULT_LOCAL_THETA
    final_logit_softcapping: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.layer_types, tuple) or not self.layer_types:
            raise ValueError(f"layer_types must be a non-empty tuple, got {self.layer_types!r}")
        bad = [k for k in self.layer_types if k not in (SLIDING, FULL)]
        if bad:
            raise ValueError(f"layer_types entry {bad[0]!r} is not one of {(SLIDING, FULL)}")
        window = self.sliding_window
        if not isinstance(window, int) or isinstance(window, bool) or window < 1:
            raise ValueError(f"sliding_window must be a positive int, got {window!r}")
        for name in ("query_pre_attn_scalar", "rope_local_theta"):
            _positive(name, getattr(self, name))
        if self.final_logit_softcapping is not None:
            _positive("final_logit_softcapping", self.final_logit_softcapping)

    def window(self, layer: int) -> int:
        """Layer `layer`'s attention window: `sliding_window` for a sliding layer, 0 (full
        attention) for a global one (the `window` argument of `Ops.attention`)."""
        return self.sliding_window if self.layer_types[layer] == SLIDING else 0

    @property
    def scale(self) -> float:
        """The attention scale `query_pre_attn_scalar ** -0.5` (transformers' expression)."""
        return self.query_pre_attn_scalar**-0.5


def _positive(name: str, value: object) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")


def text_config(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A gemma3_text config dict: `raw` itself, or a multimodal gemma3 config's `text_config`
    (its model_type set to gemma3_text, its architectures dropped)."""
    if raw.get("model_type") != "gemma3":
        return dict(raw)
    text = raw.get("text_config")
    if not isinstance(text, Mapping):
        raise ValueError("a gemma3 config needs a 'text_config' dict (the language model's)")
    out = {k: v for k, v in text.items() if k != "architectures"}
    out["model_type"] = "gemma3_text"
    for key in ("tie_word_embeddings",):  # transformers reads it from the top level too
        if key in raw and key not in text:
            out[key] = raw[key]
    return out


def check_gemma3_features(raw: Mapping[str, Any]) -> None:
    """Reject gemma3_text switches that change the math beyond `Gemma3Attention`."""
    act = raw.get("hidden_activation", raw.get("hidden_act", "gelu_pytorch_tanh"))
    if act != "gelu_pytorch_tanh":
        raise ValueError(f"hidden_activation {act!r} is not supported (only 'gelu_pytorch_tanh')")
    if raw.get("attn_logit_softcapping") is not None:
        raise ValueError("attn_logit_softcapping is not supported (Gemma 3 sets it to null)")
    if raw.get("use_bidirectional_attention"):
        raise ValueError("use_bidirectional_attention=true is not supported (causal only)")
    if raw.get("attention_bias"):
        raise ValueError("attention_bias=true is not supported for model_type 'gemma3_text'")


def gemma3_attention(raw: Mapping[str, Any], num_layers: int) -> Gemma3Attention:
    """The `Gemma3Attention` of a gemma3_text config: `layer_types`, else transformers'
    `sliding_window_pattern` rule (layer i slides unless (i + 1) % pattern == 0)."""
    layer_types = raw.get("layer_types")
    if layer_types is None:
        pattern = raw.get("sliding_window_pattern", DEFAULT_SLIDING_PATTERN)
        if not isinstance(pattern, int) or isinstance(pattern, bool) or pattern < 1:
            raise ValueError(f"sliding_window_pattern must be a positive int, got {pattern!r}")
        layer_types = [SLIDING if (i + 1) % pattern else FULL for i in range(num_layers)]
    if not isinstance(layer_types, list | tuple) or len(layer_types) != num_layers:
        raise ValueError(
            f"layer_types must list one type per layer ({num_layers}), got {layer_types!r}"
        )
    window = raw.get("sliding_window")
    if window is None:
        window = raw.get("max_position_embeddings")  # no window: sliding layers see all keys
    return Gemma3Attention(
        layer_types=tuple(layer_types),
        sliding_window=window,
        query_pre_attn_scalar=float(raw.get("query_pre_attn_scalar", 256)),
        rope_local_theta=local_theta(raw),
        final_logit_softcapping=raw.get("final_logit_softcapping"),
    )


def local_theta(raw: Mapping[str, Any]) -> float:
    """The sliding layers' RoPE base: transformers 5's `rope_parameters.sliding_attention`
    (default RoPE only), else `rope_local_base_freq`, else 10000."""
    params = raw.get("rope_parameters")
    if isinstance(params, Mapping) and isinstance(params.get(SLIDING), Mapping):
        local = params[SLIDING]
        kind = local.get("rope_type", local.get("type", "default"))
        if kind != "default":
            raise ValueError(f"rope_parameters.{SLIDING}.rope_type {kind!r} is not supported")
        if "rope_theta" in local:
            return float(local["rope_theta"])
    return float(raw.get("rope_local_base_freq", DEFAULT_LOCAL_THETA))


def global_rope_dict(raw: Mapping[str, Any]) -> dict[str, Any]:
    """`raw` with its global layers' RoPE as the llama parser reads it: transformers 5's
    `rope_parameters.full_attention` (or a legacy `rope_scaling`) and the global theta
    (default 1e6 as transformers)."""
    out = dict(raw)
    params = raw.get("rope_parameters")
    if isinstance(params, Mapping) and (SLIDING in params or FULL in params):
        full = dict(params.get(FULL) or {"rope_type": "default"})
        out.pop("rope_parameters")
        out["rope_scaling"] = None
        out["rope_parameters"] = full
        full.setdefault("rope_theta", raw.get("rope_theta", DEFAULT_GLOBAL_THETA))
    else:
        out.setdefault("rope_theta", DEFAULT_GLOBAL_THETA)
    return out


def text_weight_name(name: str) -> str | None:
    """A multimodal gemma3 checkpoint's tensor name as the text model's (`model.*`,
    `lm_head.weight`), None for a tensor outside the text model (vision tower, projector);
    a text-only checkpoint's names map to themselves."""
    if name in _TEXT_HEADS:
        return "lm_head.weight"
    for prefix, new in _TEXT_PREFIXES:
        if name.startswith(prefix):
            return new + name[len(prefix) :]
    if name.startswith("model.") and not name.startswith(("model.vision", "model.multi_modal")):
        return name
    return None
