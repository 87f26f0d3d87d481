"""Frozen model configuration (llama family) and its parsing from a HF `config.json` dict.

`ModelConfig` describes one decoder: llama, mistral (full attention only), qwen2 (qkv bias),
qwen3 (per-head q/k RMSNorm), and the mixtures of experts qwen3_moe (qwen3's attention) and
mixtral (mistral's attention), whose sparse layers `MoeConfig` describes. Every field is
validated in `__post_init__`; a bad value raises `ValueError` naming the field. The GGUF
loader builds the same dataclass from GGUF metadata.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from samebits.model.gemma3_config import (
    GEMMA3_MODEL_TYPES,
    Gemma3Attention,
    check_gemma3_features,
    gemma3_attention,
    global_rope_dict,
    text_config,
)

MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3", "qwen3_moe", "mixtral", "gemma3_text")
MOE_MODEL_TYPES = ("qwen3_moe", "mixtral")
ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "MixtralForCausalLM": "mixtral",
    "Gemma3ForCausalLM": "gemma3_text",
}
# Mixture-of-experts model types samebits does not run, and the config field that says why.
UNSUPPORTED_MOE = {
    "qwen2_moe": "shared_expert_intermediate_size (a shared expert with a sigmoid gate)",
    "deepseek_v2": "n_shared_experts (shared experts, grouped top-k routing)",
    "deepseek_v3": "n_shared_experts (shared experts, grouped top-k routing)",
}
# Config fields of a MoE checkpoint that change the math beyond `MoeConfig` (when truthy).
UNSUPPORTED_MOE_FIELDS = (
    "shared_expert_intermediate_size",
    "n_shared_experts",
    "num_shared_experts",
    "routed_scaling_factor",
    "topk_group",
)
DEFAULT_ROPE_THETA = 10000.0
DEFAULT_RMS_NORM_EPS = 1e-6


@dataclass(frozen=True)
class RopeScaling:
    """Llama-3 style RoPE frequency scaling.

    Invariants: `rope_type == "llama3"`, `factor > 0`, `0 < low_freq_factor < high_freq_factor`,
    `original_max_position_embeddings >= 1`.
    """

    rope_type: str
    factor: float
    low_freq_factor: float
    high_freq_factor: float
    original_max_position_embeddings: int

    def __post_init__(self) -> None:
        if self.rope_type != "llama3":
            raise ValueError(
                f"rope_scaling.rope_type {self.rope_type!r} is not supported by RopeScaling "
                "(llama3 only; yarn is YarnRopeScaling)"
            )
        _require_positive_float("rope_scaling.factor", self.factor)
        _require_positive_float("rope_scaling.low_freq_factor", self.low_freq_factor)
        _require_positive_float("rope_scaling.high_freq_factor", self.high_freq_factor)
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError(
                "rope_scaling.high_freq_factor must be greater than low_freq_factor, got "
                f"{self.high_freq_factor} <= {self.low_freq_factor}"
            )
        _require_positive_int(
            "rope_scaling.original_max_position_embeddings", self.original_max_position_embeddings
        )


@dataclass(frozen=True)
class YarnRopeScaling:
    """YaRN RoPE scaling (arXiv 2309.00071, as transformers' `yarn` rope type defines it).

    Each frequency blends interpolation (divided by `factor`) and extrapolation (unchanged)
    by a linear ramp over the dimensions between the correction dims of `beta_fast` and
    `beta_slow` rotations in `original_max_position_embeddings` positions (floored / ceiled
    when `truncate`); cos and sin are multiplied by `attention_factor`. `attention_factor`
    None: `0.1 * ln(factor) + 1` (1 for factor 1), filled in here.

    Invariants: `rope_type == "yarn"`, `factor >= 1`, `beta_fast >= beta_slow > 0`,
    `attention_factor > 0`, `original_max_position_embeddings >= 1`, `truncate` a bool.
    """

    rope_type: str
    factor: float
    original_max_position_embeddings: int
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None  # None: filled in by __post_init__
    truncate: bool = True

    def __post_init__(self) -> None:
        if self.rope_type != "yarn":
            raise ValueError(
                f"rope_scaling.rope_type {self.rope_type!r} is not supported by "
                "YarnRopeScaling (yarn only)"
            )
        _require_positive_float("rope_scaling.factor", self.factor)
        if self.factor < 1:
            raise ValueError(f"rope_scaling.factor must be >= 1 for yarn, got {self.factor}")
        _require_positive_int(
            "rope_scaling.original_max_position_embeddings", self.original_max_position_embeddings
        )
        _require_positive_float("rope_scaling.beta_fast", self.beta_fast)
        _require_positive_float("rope_scaling.beta_slow", self.beta_slow)
        if self.beta_fast < self.beta_slow:
            raise ValueError(
                "rope_scaling.beta_fast must be >= beta_slow, got "
                f"{self.beta_fast} < {self.beta_slow}"
            )
        if self.attention_factor is None:
            object.__setattr__(self, "attention_factor", yarn_mscale(self.factor))
        _require_positive_float("rope_scaling.attention_factor", self.attention_factor)
        if not isinstance(self.truncate, bool):
            raise ValueError(f"rope_scaling.truncate must be a bool, got {self.truncate!r}")

    @property
    def context_length(self) -> int:
        """Positions the scaled RoPE is meant for: `original_max_position_embeddings *
        factor` (what vLLM derives for yarn)."""
        return int(self.original_max_position_embeddings * self.factor)


def yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's attention temperature `0.1 * mscale * ln(scale) + 1` (1 when `scale <= 1`)."""
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


@dataclass(frozen=True)
class LinearRopeScaling:
    """Linear RoPE scaling (position interpolation): every inverse frequency divided by
    `factor` (transformers' `linear` rope type; Gemma 3's global layers).

    Invariants: `rope_type == "linear"`, `factor > 0`."""

    rope_type: str
    factor: float

    def __post_init__(self) -> None:
        if self.rope_type != "linear":
            raise ValueError(f"LinearRopeScaling needs rope_type 'linear', got {self.rope_type!r}")
        _require_positive_float("rope_scaling.factor", self.factor)


ROPE_TYPES = ("default", "llama3", "yarn", "linear")
RopeScalings = RopeScaling | YarnRopeScaling | LinearRopeScaling


@dataclass(frozen=True)
class MoeNames:
    """Checkpoint names of a sparse layer: the router is `<layer>.<block>.gate.weight`, expert
    e's projections `<layer>.<block>.experts.<e>.<gate|up|down>.weight`."""

    block: str
    gate: str
    up: str
    down: str


MOE_WEIGHT_NAMES = {
    "qwen3_moe": MoeNames("mlp", "gate_proj", "up_proj", "down_proj"),
    "mixtral": MoeNames("block_sparse_moe", "w1", "w3", "w2"),
}


@dataclass(frozen=True)
class MoeConfig:
    """The sparse (mixture-of-experts) layers of a decoder.

    Layer i is sparse iff `i not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0`
    (transformers' rule); the other layers are dense MLPs of `ModelConfig.intermediate_size`.
    A sparse layer routes each token to `num_experts_per_tok` of `num_experts` experts (each a
    SiLU-gated MLP of `moe_intermediate_size`); `norm_topk_prob` renormalizes the k routing
    weights to sum to 1 (mixtral always does).

    Invariants: `1 <= num_experts_per_tok <= num_experts`, `moe_intermediate_size >= 1`,
    `decoder_sparse_step >= 1`, `mlp_only_layers` strictly increasing non-negative ints.
    """

    num_experts: int
    num_experts_per_tok: int
    moe_intermediate_size: int
    norm_topk_prob: bool
    decoder_sparse_step: int = 1
    mlp_only_layers: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("num_experts", "num_experts_per_tok", "moe_intermediate_size",
                     "decoder_sparse_step"):  # fmt: skip
            _require_positive_int(name, getattr(self, name))
        if self.num_experts_per_tok > self.num_experts:
            raise ValueError(
                f"num_experts_per_tok ({self.num_experts_per_tok}) must be at most num_experts "
                f"({self.num_experts})"
            )
        if not isinstance(self.norm_topk_prob, bool):
            raise ValueError(f"norm_topk_prob must be a bool, got {self.norm_topk_prob!r}")
        layers = self.mlp_only_layers
        ok = isinstance(layers, tuple) and all(
            isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in layers
        )
        if not ok or list(layers) != sorted(set(layers)):
            raise ValueError(
                f"mlp_only_layers must be a tuple of distinct layer indices >= 0 in increasing "
                f"order, got {layers!r}"
            )

    def is_sparse(self, layer: int) -> bool:
        """Whether decoder layer `layer` is a mixture of experts (else a dense MLP)."""
        return layer not in self.mlp_only_layers and (layer + 1) % self.decoder_sparse_step == 0


@dataclass(frozen=True)
class ModelConfig:
    """Shape and numerics of a llama-family decoder.

    Invariants: all sizes are positive ints; `num_attention_heads % num_key_value_heads == 0`;
    `head_dim` is even (RoPE rotates pairs); `rms_norm_eps > 0`; `rope_theta > 0`.
    `head_dim * num_attention_heads` may differ from `hidden_size` (qwen3 does this).
    `attention_bias` means q/k/v projections carry a bias (never o_proj); `qk_norm` means a
    per-head RMSNorm on q and k before RoPE.
    """

    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: RopeScalings | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    attention_bias: bool
    qk_norm: bool
    moe: MoeConfig | None = None
    gemma3: Gemma3Attention | None = None  # exactly for model_type gemma3_text

    def __post_init__(self) -> None:
        if self.model_type not in MODEL_TYPES:
            raise ValueError(f"model_type must be one of {MODEL_TYPES}, got {self.model_type!r}")
        _check_moe(self.model_type, self.moe)
        _check_gemma3(self)
        for name in _INT_FIELDS:
            _require_positive_int(name, getattr(self, name))
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        _require_positive_float("rms_norm_eps", self.rms_norm_eps)
        _require_positive_float("rope_theta", self.rope_theta)
        if self.rope_scaling is not None and not isinstance(self.rope_scaling, RopeScalings):
            raise ValueError(
                "rope_scaling must be a RopeScaling, a YarnRopeScaling, a LinearRopeScaling or "
                "None, got "
                f"{self.rope_scaling!r}"
            )
        for name in ("tie_word_embeddings", "attention_bias", "qk_norm"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data (the fingerprint's and the random weights' recipe); `moe`
        only for a mixture of experts, so a dense model's dict is what it was before MoE."""
        d = dataclasses.asdict(self)
        if self.gemma3 is None:
            del d["gemma3"]
        else:
            d["gemma3"]["layer_types"] = list(self.gemma3.layer_types)
        if self.moe is None:
            del d["moe"]
        else:
            d["moe"]["mlp_only_layers"] = list(self.moe.mlp_only_layers)
        return d

    def is_sparse(self, layer: int) -> bool:
        """Whether decoder layer `layer` is a mixture of experts."""
        return self.moe is not None and self.moe.is_sparse(layer)

    @property
    def has_dense_layers(self) -> bool:
        """Whether some decoder layer is a dense MLP of `intermediate_size`."""
        return not all(self.is_sparse(i) for i in range(self.num_hidden_layers))

    @property
    def max_context_len(self) -> int:
        """The longest context the model supports: `max_position_embeddings`, or for yarn
        scaling `original_max_position_embeddings * factor` when that is larger (Qwen's
        long-context recipe adds yarn to a config and keeps max_position_embeddings)."""
        scaling = self.rope_scaling
        if isinstance(scaling, YarnRopeScaling):
            return max(self.max_position_embeddings, scaling.context_length)
        return self.max_position_embeddings

    @property
    def q_size(self) -> int:
        """Width of the query projection output: `num_attention_heads * head_dim`."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of each key/value projection output: `num_key_value_heads * head_dim`."""
        return self.num_key_value_heads * self.head_dim


def _check_gemma3(cfg: ModelConfig) -> None:
    gemma = cfg.gemma3
    if (gemma is not None) != (cfg.model_type == "gemma3_text"):
        raise ValueError(
            "gemma3 must be a Gemma3Attention exactly for model_type 'gemma3_text', got "
            f"{gemma!r} for model_type {cfg.model_type!r}"
        )
    if gemma is not None and not isinstance(gemma, Gemma3Attention):
        raise ValueError(f"gemma3 must be a Gemma3Attention or None, got {gemma!r}")
    if gemma is not None and len(gemma.layer_types) != cfg.num_hidden_layers:
        raise ValueError(
            f"gemma3.layer_types has {len(gemma.layer_types)} entries for "
            f"{cfg.num_hidden_layers} layers"
        )


def _check_moe(model_type: str, moe: MoeConfig | None) -> None:
    if (moe is not None) != (model_type in MOE_MODEL_TYPES):
        raise ValueError(
            f"moe must be a MoeConfig exactly for the model types {MOE_MODEL_TYPES}, got "
            f"{moe!r} for model_type {model_type!r}"
        )
    if moe is not None and not isinstance(moe, MoeConfig):
        raise ValueError(f"moe must be a MoeConfig or None, got {moe!r}")
    every_layer = moe is not None and moe.decoder_sparse_step == 1 and not moe.mlp_only_layers
    if model_type == "mixtral" and not (every_layer and moe.norm_topk_prob):
        raise ValueError(
            "mixtral's MoeConfig must have norm_topk_prob=True, decoder_sparse_step=1 and no "
            f"mlp_only_layers (every layer sparse, weights renormalized), got {moe!r}"
        )


_INT_FIELDS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
)


def model_config_from_hf(raw: Mapping[str, Any]) -> ModelConfig:
    """Build a `ModelConfig` from a parsed HF `config.json`.

    Accepts both the `rope_theta` + `rope_scaling` layout and transformers 5's
    `rope_parameters`. Raises `ValueError` naming the field for an unsupported architecture,
    activation, bias layout, RoPE type or sliding-window attention (outside Gemma 3).
    """
    if raw.get("model_type") in GEMMA3_MODEL_TYPES:
        return _gemma3_from_hf(raw)
    model_type = _model_type(raw)
    _check_supported_features(raw, model_type)
    hidden_size = _required(raw, "hidden_size")
    num_heads = _required(raw, "num_attention_heads")
    rope_theta, rope_scaling = _rope_from_hf(raw)
    moe = _moe_from_hf(raw, model_type)
    return ModelConfig(
        model_type=model_type,
        vocab_size=_required(raw, "vocab_size"),
        hidden_size=hidden_size,
        intermediate_size=_required(raw, "intermediate_size"),
        num_hidden_layers=_required(raw, "num_hidden_layers"),
        num_attention_heads=num_heads,
        num_key_value_heads=raw.get("num_key_value_heads") or num_heads,
        head_dim=raw.get("head_dim") or _derived_head_dim(hidden_size, num_heads),
        rms_norm_eps=float(raw.get("rms_norm_eps", DEFAULT_RMS_NORM_EPS)),
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        max_position_embeddings=_required(raw, "max_position_embeddings"),
        tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
        attention_bias=model_type == "qwen2",
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
        moe=moe,
    )


# transformers' Gemma3TextConfig defaults (hub configs leave these fields out)
_GEMMA3_DEFAULTS = dict(
    vocab_size=262208, hidden_size=2304, intermediate_size=9216, num_hidden_layers=26,
    num_attention_heads=8, num_key_value_heads=4, head_dim=256, max_position_embeddings=131072,
    rms_norm_eps=1e-6, tie_word_embeddings=True, sliding_window=4096,
)  # fmt: skip


def _gemma3_from_hf(raw: Mapping[str, Any]) -> ModelConfig:
    """A gemma3_text config (or a gemma3 config's text part), transformers' defaults filled."""
    text = text_config(raw)
    for arch in text.get("architectures") or ():
        if ARCHITECTURES.get(arch) != "gemma3_text":
            raise ValueError(f"architectures entry {arch!r} is not supported for gemma3_text")
    text = {**_GEMMA3_DEFAULTS, **{k: v for k, v in text.items() if v is not None}}
    check_gemma3_features(text)
    rope_theta, rope_scaling = _rope_from_hf(global_rope_dict(text))
    layers = _required(text, "num_hidden_layers")
    return ModelConfig(
        model_type="gemma3_text",
        vocab_size=_required(text, "vocab_size"),
        hidden_size=_required(text, "hidden_size"),
        intermediate_size=_required(text, "intermediate_size"),
        num_hidden_layers=layers,
        num_attention_heads=_required(text, "num_attention_heads"),
        num_key_value_heads=_required(text, "num_key_value_heads"),
        head_dim=_required(text, "head_dim"),
        rms_norm_eps=float(text["rms_norm_eps"]),
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        max_position_embeddings=_required(text, "max_position_embeddings"),
        tie_word_embeddings=bool(text["tie_word_embeddings"]),
        attention_bias=False,
        qk_norm=True,
        gemma3=gemma3_attention(text, layers),
    )


def _moe_from_hf(raw: Mapping[str, Any], model_type: str) -> MoeConfig | None:
    """The `MoeConfig` of a qwen3_moe / mixtral config.json (None for a dense model type).

    qwen3_moe: `num_experts` (transformers 5 writes `num_local_experts`), `num_experts_per_tok`,
    `moe_intermediate_size`, `norm_topk_prob` (default false, as transformers),
    `decoder_sparse_step` (default 1), `mlp_only_layers` (default []). mixtral:
    `num_local_experts`, `num_experts_per_tok`; every layer sparse, experts of
    `intermediate_size`, weights renormalized."""
    if model_type not in MOE_MODEL_TYPES:
        return None
    for name in UNSUPPORTED_MOE_FIELDS:
        if raw.get(name):
            raise ValueError(f"{name}={raw[name]!r} is not supported (shared experts / grouped "
                             f"routing are not implemented for model_type {model_type!r})")  # fmt: skip
    top_k = _required(raw, "num_experts_per_tok")
    if model_type == "mixtral":
        experts, inter = _required(raw, "num_local_experts"), _required(raw, "intermediate_size")
        return MoeConfig(experts, top_k, inter, norm_topk_prob=True)
    experts = raw.get("num_experts", raw.get("num_local_experts"))
    if experts is None:
        raise ValueError("required field 'num_experts' is missing")
    layers = raw.get("mlp_only_layers") or []
    if not isinstance(layers, list):
        raise ValueError(f"mlp_only_layers must be a list of layer indices, got {layers!r}")
    norm = raw.get("norm_topk_prob", False)
    if not isinstance(norm, bool):
        raise ValueError(f"norm_topk_prob must be a bool, got {norm!r}")
    return MoeConfig(
        num_experts=experts,
        num_experts_per_tok=top_k,
        moe_intermediate_size=_required(raw, "moe_intermediate_size"),
        norm_topk_prob=norm,
        decoder_sparse_step=raw.get("decoder_sparse_step", 1),
        mlp_only_layers=tuple(sorted(set(layers))),
    )


def _model_type(raw: Mapping[str, Any]) -> str:
    model_type = raw.get("model_type")
    if model_type in UNSUPPORTED_MOE:
        raise ValueError(
            f"model_type {model_type!r} is not supported: {UNSUPPORTED_MOE[model_type]} "
            f"(mixtures of experts supported: {MOE_MODEL_TYPES})"
        )
    if model_type not in MODEL_TYPES:
        raise ValueError(f"model_type {model_type!r} is not supported (supported: {MODEL_TYPES})")
    for arch in raw.get("architectures") or ():
        if ARCHITECTURES.get(arch) != model_type:
            raise ValueError(
                f"architectures entry {arch!r} is not supported for model_type {model_type!r} "
                f"(supported: {sorted(ARCHITECTURES)})"
            )
    return model_type


def _check_supported_features(raw: Mapping[str, Any], model_type: str) -> None:
    """Reject config switches that change the math beyond what `ModelConfig` describes."""
    if raw.get("hidden_act", "silu") != "silu":
        raise ValueError(f"hidden_act {raw.get('hidden_act')!r} is not supported (only 'silu')")
    if raw.get("mlp_bias"):
        raise ValueError("mlp_bias=true is not supported")
    if model_type != "qwen2" and raw.get("attention_bias"):
        raise ValueError(f"attention_bias=true is not supported for model_type {model_type!r}")
    layer_types = raw.get("layer_types") or ()
    if any(kind != "full_attention" for kind in layer_types):
        raise ValueError(f"layer_types {list(layer_types)} is not supported (full attention only)")
    if "use_sliding_window" in raw:
        if raw["use_sliding_window"]:
            raise ValueError("use_sliding_window=true is not supported (full attention only)")
        return
    window = raw.get("sliding_window")
    if window is not None and window < raw.get("max_position_embeddings", math.inf):
        raise ValueError(
            f"sliding_window={window} is not supported (full attention only; "
            "null or >= max_position_embeddings is fine)"
        )


def _rope_from_hf(
    raw: Mapping[str, Any],
) -> tuple[float, RopeScalings | None]:
    """(rope_theta, scaling) as transformers reads them: a non-empty legacy `rope_scaling`
    wins over transformers 5's `rope_parameters`; the theta is the dict's `rope_theta`, else
    the top-level one, else DEFAULT_ROPE_THETA."""
    params = raw.get("rope_scaling") or raw.get("rope_parameters") or {}
    if not isinstance(params, Mapping):
        raise ValueError(f"rope_scaling must be a dict, got {params!r}")
    theta = params.get("rope_theta", raw.get("rope_theta", DEFAULT_ROPE_THETA))
    return float(theta), _rope_scaling(params, raw)


def _rope_scaling(params: Mapping[str, Any], raw: Mapping[str, Any]) -> RopeScalings | None:
    """The scaling of a rope_scaling / rope_parameters dict (`rope_type`, or the legacy
    `type`); None for the default RoPE. ValueError naming an unsupported type."""
    rope_type = params.get("rope_type", params.get("type", "default"))
    if rope_type == "default":
        return None
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"rope_scaling.rope_type {rope_type!r} is not supported (supported: {ROPE_TYPES})"
        )
    try:
        if rope_type == "yarn":
            return _yarn_scaling(params, raw)
        if rope_type == "linear":
            return LinearRopeScaling("linear", float(params["factor"]))
        return RopeScaling(
            rope_type=rope_type,
            factor=float(params["factor"]),
            low_freq_factor=float(params["low_freq_factor"]),
            high_freq_factor=float(params["high_freq_factor"]),
            original_max_position_embeddings=_original_max_positions(params, raw),
        )
    except KeyError as exc:
        raise ValueError(f"rope_scaling is missing field {exc.args[0]!r}") from None


def _original_max_positions(params: Mapping[str, Any], raw: Mapping[str, Any]) -> int:
    """The pre-training context, as transformers reads it: a top-level
    `original_max_position_embeddings` first (Phi-3 keeps it there), then the scaling
    dict's, then `max_position_embeddings`."""
    key = "original_max_position_embeddings"
    for value in (raw.get(key), params.get(key)):
        if value is not None:
            return int(value)
    return int(_required(raw, "max_position_embeddings"))


def _yarn_scaling(params: Mapping[str, Any], raw: Mapping[str, Any]) -> YarnRopeScaling:
    """`YarnRopeScaling` with transformers' defaults: factor None is max_position_embeddings
    / original; beta_fast / beta_slow unset (or 0) are 32 / 1; attention_factor unset is
    mscale / mscale_all_dim's ratio when both are set, else 0.1 * ln(factor) + 1."""
    original = _original_max_positions(params, raw)
    factor = params.get("factor")
    if factor is None:
        factor = _required(raw, "max_position_embeddings") / original
    factor = float(factor)
    attention = params.get("attention_factor")
    mscale, mscale_all_dim = params.get("mscale"), params.get("mscale_all_dim")
    if attention is None and mscale and mscale_all_dim:
        attention = yarn_mscale(factor, float(mscale)) / yarn_mscale(factor, float(mscale_all_dim))
    return YarnRopeScaling(
        rope_type="yarn",
        factor=factor,
        original_max_position_embeddings=original,
        beta_fast=float(params.get("beta_fast") or 32.0),
        beta_slow=float(params.get("beta_slow") or 1.0),
        attention_factor=None if attention is None else float(attention),
        truncate=params.get("truncate", True),
    )


def _required(raw: Mapping[str, Any], name: str) -> Any:
    if raw.get(name) is None:
        raise ValueError(f"required field {name!r} is missing")
    return raw[name]


def _derived_head_dim(hidden_size: int, num_heads: int) -> int:
    if not isinstance(hidden_size, int) or not isinstance(num_heads, int) or num_heads <= 0:
        raise ValueError(
            f"cannot derive head_dim from hidden_size={hidden_size!r}, "
            f"num_attention_heads={num_heads!r}"
        )
    if hidden_size % num_heads != 0:
        raise ValueError(
            f"head_dim is missing and hidden_size ({hidden_size}) is not a multiple of "
            f"num_attention_heads ({num_heads})"
        )
    return hidden_size // num_heads


def _require_positive_int(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")


def _require_positive_float(name: str, value: object) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
