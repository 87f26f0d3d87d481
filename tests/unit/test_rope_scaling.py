"""RoPE scaling: yarn parsed as transformers reads it (both config layouts, every option),
its frequencies and attention factor equal to transformers' within float32 rounding, tables
the same on every build, unsupported types named, GGUF yarn metadata, and the long context
yarn gives a model (`max_context_len`)."""

from __future__ import annotations

import copy
import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from samebits.bits import same_bits
from samebits.model import YarnRopeScaling, load_model
from samebits.model.config import LinearRopeScaling, RopeScaling, model_config_from_hf
from samebits.model.presets import PRESETS
from samebits.model.rope_tables import inverse_frequencies, rope_tables

_QWEN3 = dict(
    model_type="qwen3", vocab_size=320, hidden_size=64, intermediate_size=128,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
    max_position_embeddings=512, rms_norm_eps=1e-6, use_sliding_window=False,
)  # fmt: skip
_YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64}

# (extra top-level fields, rope dict): each yarn option transformers reads
YARN_VARIANTS = {
    "defaults": ({}, _YARN),
    "legacy-type-key": ({}, {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64}),
    "betas": ({}, {**_YARN, "beta_fast": 16.0, "beta_slow": 2.0}),
    "zero-betas-are-defaults": ({}, {**_YARN, "beta_fast": 0, "beta_slow": 0}),
    "no-truncate": ({}, {**_YARN, "truncate": False}),
    "attention-factor": ({}, {**_YARN, "attention_factor": 1.5}),
    "mscale": ({}, {**_YARN, "mscale": 1.0, "mscale_all_dim": 0.5}),
    "lone-mscale-ignored": ({}, {**_YARN, "mscale": 0.7}),
    "factor-from-lengths": ({}, {**_YARN, "factor": None}),
    "top-level-original": ({"original_max_position_embeddings": 128}, _YARN),
    "theta-1e6": ({}, {**_YARN, "rope_theta": 1e6}),
    "factor-1": ({}, {**_YARN, "factor": 1.0}),
}  # fmt: skip


def _raw(extra: dict, rope: dict, layout: str) -> dict:
    """A qwen3 config.json dict with `rope` as `rope_parameters` or legacy `rope_scaling`."""
    theta = {"rope_theta": rope.get("rope_theta", 10000.0)}
    rope = {**rope, **theta} if layout == "rope_parameters" else dict(rope)
    return {**_QWEN3, **extra, **theta, layout: rope}


def _transformers_yarn(raw: dict) -> tuple[np.ndarray, float]:
    """transformers' yarn inverse frequencies (float32) and attention factor for `raw`."""
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = transformers.Qwen3Config(**_hf_fields(raw))
    inv, factor = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    return inv.double().numpy(), factor


def _hf_fields(raw: dict) -> dict:
    """`raw` as Qwen3Config keywords (a deep copy: transformers edits the RoPE dict)."""
    return copy.deepcopy({k: v for k, v in raw.items() if k != "model_type"})


@pytest.mark.parametrize("layout", ["rope_parameters", "rope_scaling"])
@pytest.mark.parametrize("variant", sorted(YARN_VARIANTS))
def test_yarn_equals_transformers(variant, layout):
    extra, rope = YARN_VARIANTS[variant]
    raw = _raw(extra, rope, layout)
    config = model_config_from_hf(raw)
    scaling = config.rope_scaling
    assert isinstance(scaling, YarnRopeScaling)
    ref_inv, ref_factor = _transformers_yarn(raw)
    ours = inverse_frequencies(config.head_dim, config.rope_theta, scaling)
    # transformers computes in float32, samebits in float64: agree to float32 rounding
    np.testing.assert_allclose(ours, ref_inv, rtol=2e-6, atol=0)
    assert scaling.attention_factor == pytest.approx(ref_factor, rel=1e-12)


def test_yarn_fields_and_defaults():
    scaling = model_config_from_hf(_raw({}, _YARN, "rope_parameters")).rope_scaling
    assert scaling == YarnRopeScaling("yarn", 8.0, 64, 32.0, 1.0, 0.1 * np.log(8.0) + 1, True)
    assert YarnRopeScaling("yarn", 1.0, 64).attention_factor == 1.0
    derived = model_config_from_hf(_raw({}, {**_YARN, "factor": None}, "rope_parameters"))
    assert derived.rope_scaling.factor == 8.0  # 512 / 64


def test_yarn_blends_frequencies_in_the_correction_range():
    """Below the range the frequencies are unchanged, above it divided by factor."""
    scaling = YarnRopeScaling("yarn", 8.0, 64)
    plain = inverse_frequencies(16, 10000.0, None)
    inv = inverse_frequencies(16, 10000.0, scaling)
    assert inv[0] == plain[0]  # ramp starts at dim 0 (low = 0)
    assert np.array_equal(inv[3:], plain[3:] / 8.0)  # high = ceil(2.02) = 3
    assert np.all((inv[1:3] < plain[1:3]) & (inv[1:3] > plain[1:3] / 8.0))


def test_yarn_tables_scale_cos_and_sin():
    scaling = YarnRopeScaling("yarn", 8.0, 64)
    cos, sin = rope_tables(16, 10000.0, scaling, 512)
    assert cos.dtype == sin.dtype == torch.float32 and cos.shape == (512, 8)
    assert torch.allclose(cos[0], torch.full((8,), scaling.attention_factor))
    assert torch.equal(sin[0], torch.zeros(8))
    norm = (cos.double() ** 2 + sin.double() ** 2).sqrt()
    assert torch.allclose(norm, torch.full_like(norm, scaling.attention_factor), rtol=1e-6)


def test_yarn_tables_agree_with_transformers_rotary_embedding():
    import transformers
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding

    raw = _raw({}, _YARN, "rope_parameters")
    config = model_config_from_hf(raw)
    cos, sin = rope_tables(16, config.rope_theta, config.rope_scaling, 512)
    rotary = Qwen3RotaryEmbedding(transformers.Qwen3Config(**_hf_fields(raw)))
    positions = torch.arange(512)[None]
    ref_cos, ref_sin = rotary(torch.zeros(1, dtype=torch.float32), positions)
    # transformers' float32 angles lose ~ position * 2**-24 rad; samebits' are float64
    assert torch.allclose(cos, ref_cos[0, :, :8], atol=1e-4, rtol=0)
    assert torch.allclose(sin, ref_sin[0, :, :8], atol=1e-4, rtol=0)
    assert torch.equal(ref_cos[0, :, :8], ref_cos[0, :, 8:])  # rotate-half: halves repeat


@pytest.mark.parametrize(
    "scaling",
    [None, YarnRopeScaling("yarn", 4.0, 32768), RopeScaling("llama3", 8.0, 1.0, 4.0, 8192)],
)
def test_tables_are_the_same_on_every_build_and_length(scaling):
    cos, sin = rope_tables(128, 1e6, scaling, 4096)
    again_cos, again_sin = rope_tables(128, 1e6, scaling, 4096)
    assert same_bits(cos, again_cos) and same_bits(sin, again_sin)
    short_cos, short_sin = rope_tables(128, 1e6, scaling, 1000)  # row p depends on p only
    assert same_bits(short_cos, cos[:1000]) and same_bits(short_sin, sin[:1000])


def test_linear_rope_type_parses_and_divides_every_frequency():
    """`linear` (Gemma 3's global layers, transformers' rope type): parsed from the config,
    every inverse frequency divided by the factor."""
    raw = _raw({}, {"rope_type": "linear", "factor": 2.0}, "rope_parameters")
    scaling = model_config_from_hf(raw).rope_scaling
    assert scaling == LinearRopeScaling("linear", 2.0)
    plain = inverse_frequencies(16, 10000.0, None)
    assert same_bits(inverse_frequencies(16, 10000.0, scaling), plain / 2.0)


@pytest.mark.parametrize("rope_type", ["longrope", "dynamic", "proportional"])
def test_unsupported_rope_types_are_named(rope_type):
    raw = _raw({}, {"rope_type": rope_type, "factor": 2.0}, "rope_parameters")
    with pytest.raises(ValueError, match=f"rope_type '{rope_type}' is not supported"):
        model_config_from_hf(raw)
    with pytest.raises(ValueError, match=f"'{rope_type}' is not supported"):
        inverse_frequencies(16, 10000.0, SimpleNamespace(rope_type=rope_type))


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        (dict(factor=0.5), "factor must be >= 1"),
        (dict(factor=float("inf")), "factor"),
        (dict(beta_fast=1.0, beta_slow=2.0), "beta_fast must be >= beta_slow"),
        (dict(beta_slow=-1.0), "beta_slow"),
        (dict(attention_factor=0.0), "attention_factor"),
        (dict(truncate=1), "truncate"),
        (dict(original_max_position_embeddings=0), "original_max_position_embeddings"),
        (dict(rope_type="llama3"), "rope_type"),
    ],
)
def test_yarn_validation_names_the_field(fields, named):
    args = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, **fields}
    with pytest.raises(ValueError, match=named):
        YarnRopeScaling(**args)


def test_yarn_is_in_the_fingerprinted_model_config():
    """The fingerprint hashes `dataclasses.asdict(model_config)`: every yarn field is in it."""
    config = dataclasses.replace(
        PRESETS["qwen3-8b"], rope_scaling=YarnRopeScaling("yarn", 4.0, 32768)
    )
    fields = dataclasses.asdict(config)["rope_scaling"]
    assert fields == {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
        "beta_fast": 32.0, "beta_slow": 1.0, "attention_factor": 0.1 * np.log(4.0) + 1,
        "truncate": True,
    }  # fmt: skip


def test_qwen3_recipe_gives_a_128k_context():
    """Qwen3-8B's config.json with Qwen's yarn block keeps max_position_embeddings 40960; the
    context is original * factor = 131072 (vLLM's rule); without yarn it stays 40960."""
    raw = {**_QWEN3, "max_position_embeddings": 40960, "rope_theta": 1e6}
    assert model_config_from_hf(raw).max_context_len == 40960
    recipe = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    config = model_config_from_hf({**raw, "rope_scaling": recipe})
    assert config.max_position_embeddings == 40960 and config.max_context_len == 131072
    assert PRESETS["llama-3-8b"].max_context_len == 131072


def test_gguf_yarn_metadata_loads_as_the_hf_config(tmp_path):
    from tiny_models import make_tiny_checkpoint, write_tiny_gguf

    rope = {**_YARN, "rope_theta": 10000.0}
    hf_dir = make_tiny_checkpoint(
        tmp_path / "hf", "llama", rope_parameters=rope, max_position_embeddings=512
    )
    hf = load_model(hf_dir).config
    gguf_config = load_model(write_tiny_gguf(tmp_path / "yarn.gguf", hf_dir)).config
    assert isinstance(hf.rope_scaling, YarnRopeScaling)
    assert gguf_config.rope_scaling == hf.rope_scaling
