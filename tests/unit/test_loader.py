"""Loader tests: weights and config equal what transformers loads, and bad input fails clearly."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from samebits.bits import same_bits
from samebits.model import ModelLoadError, RopeScaling, load_model
from samebits.model.checkpoint import expected_weight_shapes, model_name_from_path
from samebits.model.config import _INT_FIELDS
from samebits.model.gguf_loader import SUPPORTED_TYPES, dequantize
from tiny_models import make_tiny_checkpoint, write_tiny_gguf

ARCH_FIXTURES = ["tiny_llama_dir", "tiny_qwen2_dir", "tiny_qwen3_dir", "tiny_mistral_dir"]
Q = gguf.GGMLQuantizationType


def _hf_model(path: Path, **kwargs):
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **kwargs)


def _assert_weights_equal(ours: dict[str, torch.Tensor], reference: dict[str, torch.Tensor]):
    for name, tensor in ours.items():
        assert tensor.dtype == torch.float32 and tensor.is_contiguous(), name
        assert same_bits(tensor, reference[name]), name


def _copy(src: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(src, tmp_path / src.name))


def _edit_json(path: Path, **changes) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


# --- HF folders -------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ARCH_FIXTURES)
def test_hf_weights_equal_transformers(fixture, request):
    folder = request.getfixturevalue(fixture)
    loaded = load_model(folder)
    reference = _hf_model(folder).state_dict()
    assert set(loaded.weights) == set(reference)  # untied: lm_head present on both sides
    assert set(loaded.weights) == set(expected_weight_shapes(loaded.config))
    _assert_weights_equal(loaded.weights, reference)


COMPARED_FIELDS = (
    *_INT_FIELDS, "rms_norm_eps", "tie_word_embeddings",
)  # fmt: skip


def _assert_config_matches(config, ref) -> None:
    """Our ModelConfig equals transformers' config on every shared field and rope_theta."""
    for field in COMPARED_FIELDS:
        assert getattr(config, field) == getattr(ref, field), field
    assert config.rope_theta == ref.rope_parameters["rope_theta"]


@pytest.mark.parametrize("fixture", ARCH_FIXTURES)
def test_hf_config_matches_transformers(fixture, request):
    folder = request.getfixturevalue(fixture)
    config = load_model(folder).config
    hf = _hf_model(folder)
    ref, state = hf.config, hf.state_dict()
    _assert_config_matches(config, ref)
    assert config.model_type == ref.model_type
    assert config.attention_bias == ("model.layers.0.self_attn.q_proj.bias" in state)
    assert config.qk_norm == ("model.layers.0.self_attn.q_norm.weight" in state)
    if ref.rope_parameters["rope_type"] == "default":
        assert config.rope_scaling is None
    else:
        scaling = dataclasses.asdict(config.rope_scaling)
        assert scaling == {k: ref.rope_parameters[k] for k in scaling}


def test_llama_fixture_has_llama3_rope_scaling(tiny_llama_dir):
    scaling = load_model(tiny_llama_dir).config.rope_scaling
    assert isinstance(scaling, RopeScaling) and scaling.rope_type == "llama3"


def test_sharded_equals_single(tiny_qwen3_dir, tmp_path):
    sharded = make_tiny_checkpoint(tmp_path / "sharded", "qwen3", sharded=True)
    shards = sorted(sharded.glob("*.safetensors"))
    assert len(shards) > 1 and (sharded / "model.safetensors.index.json").is_file()
    loaded = load_model(sharded)
    single = load_model(tiny_qwen3_dir)
    assert loaded.config == single.config
    assert list(loaded.weights) == list(single.weights)
    _assert_weights_equal(loaded.weights, single.weights)
    assert {str(s) for s in shards} <= set(loaded.source_files)


def test_bf16_checkpoint_becomes_float32(tiny_qwen2_dir, tmp_path):
    folder = _copy(tiny_qwen2_dir, tmp_path)
    original = load_file(str(folder / "model.safetensors"))
    halved = {name: t.to(torch.bfloat16) for name, t in original.items()}
    save_file(halved, str(folder / "model.safetensors"))
    loaded = load_model(folder)
    _assert_weights_equal(loaded.weights, {n: t.to(torch.float32) for n, t in halved.items()})


def test_tied_checkpoint_has_no_lm_head(tiny_qwen3_dir, tmp_path):
    folder = _copy(tiny_qwen3_dir, tmp_path)
    _edit_json(folder / "config.json", tie_word_embeddings=True)
    loaded = load_model(folder)
    assert loaded.config.tie_word_embeddings
    assert "lm_head.weight" not in loaded.weights
    assert set(loaded.weights) == set(expected_weight_shapes(loaded.config))


def test_source_files_and_name(tiny_mistral_dir):
    loaded = load_model(tiny_mistral_dir, progress=True)
    assert loaded.name == tiny_mistral_dir.name
    names = [Path(f).name for f in loaded.source_files]
    assert names[:2] == ["config.json", "model.safetensors"]
    assert "chat_template.jinja" in names and "generation_config.json" in names
    assert all(Path(f).is_file() for f in loaded.source_files)


def test_mistral_large_sliding_window_is_full_attention(tiny_mistral_dir, tmp_path):
    folder = _copy(tiny_mistral_dir, tmp_path)
    _edit_json(folder / "config.json", sliding_window=4096)  # >= max_position_embeddings
    assert load_model(folder).config.max_position_embeddings == 256


# --- GGUF ---------------------------------------------------------------------------------------


def test_gguf_round_trip_undoes_llama_cpp_permutation(tiny_mistral_dir, tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny.F32.gguf", tiny_mistral_dir)
    loaded = load_model(path)
    hf = load_model(tiny_mistral_dir)
    assert loaded.name == "tiny"
    # GGUF stores rms_norm_eps as float32; the loader keeps the file's value as it is.
    eps32 = float(np.float32(hf.config.rms_norm_eps))
    assert loaded.config == dataclasses.replace(hf.config, model_type="llama", rms_norm_eps=eps32)
    assert list(loaded.weights) == list(hf.weights)
    _assert_weights_equal(loaded.weights, hf.weights)


def test_gguf_quant_types_equal_transformers(tiny_mistral_dir, tmp_path):
    overrides = {
        "token_embd.weight": Q.Q8_0,
        "output.weight": Q.F16,
        "blk.0.attn_q.weight": Q.Q4_0,
        "blk.0.attn_k.weight": Q.Q4_1,
        "blk.1.attn_q.weight": Q.Q8_0,
        "blk.1.attn_k.weight": Q.BF16,
        "blk.1.ffn_down.weight": Q.Q4_1,
    }
    path = write_tiny_gguf(tmp_path / "mixed.gguf", tiny_mistral_dir, Q.Q4_0, overrides)
    loaded = load_model(path)
    reference = _hf_model(tmp_path, gguf_file=path.name).state_dict()
    assert set(loaded.weights) == set(reference)
    _assert_weights_equal(loaded.weights, reference)
    exact = load_model(tiny_mistral_dir).weights["model.layers.0.input_layernorm.weight"]
    assert same_bits(loaded.weights["model.layers.0.input_layernorm.weight"], exact)


def _random_blocks(qtype: Q, rows: int, rng: np.random.Generator) -> np.ndarray:
    """Random blocks of `qtype` whose fp16 scale fields hold small finite values."""
    block_size, type_size = gguf.GGML_QUANT_SIZES[qtype]
    n_blocks = rows * (256 // block_size)
    blocks = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    scale_offsets = {Q.Q4_K: (0, 2), Q.Q6_K: (208,), Q.Q4_1: (0, 2)}.get(qtype, (0,))
    for offset in scale_offsets:
        scales = rng.uniform(-0.1, 0.1, size=n_blocks).astype(np.float16)
        blocks[:, offset : offset + 2] = scales.view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(rows, -1)


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q4_1, Q.Q4_K, Q.Q6_K])
def test_dequantize_matches_independent_implementation(qtype):
    # transformers' torch dequantizer is a separate implementation of ggml's block formats.
    from transformers.integrations.gguf.dequant import dequantize as torch_dequantize

    blocks = _random_blocks(qtype, rows=8, rng=np.random.default_rng(int(qtype)))
    ours = dequantize(blocks, qtype)
    reference = torch_dequantize(torch.from_numpy(blocks.reshape(-1).copy()), int(qtype))
    assert ours.shape == (8, 256) and ours.dtype == torch.float32
    assert same_bits(ours, reference.reshape(8, 256))


def test_supported_types_are_the_documented_ones():
    expected = {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K"}
    assert {t.name for t in SUPPORTED_TYPES} == expected


def test_default_model_config(smollm2_model, smollm2_gguf):
    assert smollm2_model.name == "SmolLM2-135M-Instruct"
    assert smollm2_model.source_files == (str(smollm2_gguf),)
    config = smollm2_model.config
    assert config.tie_word_embeddings and "lm_head.weight" not in smollm2_model.weights
    assert set(smollm2_model.weights) == set(expected_weight_shapes(config))


@pytest.mark.slow
def test_smollm2_weights_equal_transformers(smollm2_model, smollm2_gguf):
    hf = _hf_model(smollm2_gguf.parent, gguf_file=smollm2_gguf.name)
    reference, ref_config = hf.state_dict(), hf.config
    _assert_weights_equal(smollm2_model.weights, reference)
    config = smollm2_model.config
    _assert_config_matches(config, ref_config)


# --- bad input ----------------------------------------------------------------------------------


def _load_error(path: Path) -> str:
    with pytest.raises(ModelLoadError) as info:
        load_model(path)
    return str(info.value)


def test_missing_path(tmp_path):
    message = _load_error(tmp_path / "nope")
    assert str(tmp_path / "nope") in message and "no such file" in message


def test_not_a_model_file(tmp_path):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"\0" * 16)
    assert "expected a HF model folder or a .gguf file" in _load_error(path)


@pytest.mark.parametrize(
    ("removed", "reason"),
    [
        ("config.json", "config.json: file is missing"),
        ("model.safetensors", "no *.safetensors weights found"),
        ("tokenizer.json", "tokenizer.json: missing"),
    ],
)
def test_missing_file(tiny_llama_dir, tmp_path, removed, reason):
    folder = _copy(tiny_llama_dir, tmp_path)
    (folder / removed).unlink()
    message = _load_error(folder)
    assert str(folder) in message and reason in message


def test_truncated_safetensors(tiny_llama_dir, tmp_path):
    folder = _copy(tiny_llama_dir, tmp_path)
    path = folder / "model.safetensors"
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size - 100)
    message = _load_error(folder)
    assert str(path) in message and "not a readable safetensors file" in message


def test_missing_shard(tmp_path):
    folder = make_tiny_checkpoint(tmp_path / "sharded", "llama", sharded=True)
    shard = sorted(folder.glob("*.safetensors"))[-1]
    shard.unlink()
    message = _load_error(folder)
    assert str(shard) in message and "missing" in message


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"model_type": "gpt2"}, "model_type 'gpt2' is not supported"),
        ({"architectures": ["Qwen3MoeForCausalLM"]}, "'Qwen3MoeForCausalLM' is not supported"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu' is not supported"),
        ({"sliding_window": 128}, "sliding_window=128 is not supported"),
        ({"rope_parameters": {"rope_type": "longrope", "factor": 4.0}}, "'longrope' is not"),
        ({"rope_scaling": {"type": "dynamic", "factor": 2.0}}, "'dynamic' is not supported"),
        ({"num_key_value_heads": 3}, "num_key_value_heads"),
        ({"hidden_size": None}, "'hidden_size' is missing"),
    ],
)
def test_bad_config(tiny_mistral_dir, tmp_path, changes, reason):
    folder = _copy(tiny_mistral_dir, tmp_path)
    _edit_json(folder / "config.json", **changes)
    message = _load_error(folder)
    assert str(folder / "config.json") in message and reason in message


def test_tensor_shape_mismatch(tiny_llama_dir, tmp_path):
    folder = _copy(tiny_llama_dir, tmp_path)
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    name = "model.layers.1.self_attn.k_proj.weight"
    tensors[name] = tensors[name][:16].contiguous()
    save_file(tensors, str(path))
    message = _load_error(folder)
    assert str(path) in message and name in message
    assert "shape [16, 64], expected [32, 64]" in message


def test_tensor_missing(tiny_llama_dir, tmp_path):
    folder = _copy(tiny_llama_dir, tmp_path)
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    del tensors["model.layers.0.mlp.up_proj.weight"]
    save_file(tensors, str(path))
    message = _load_error(folder)
    assert "'model.layers.0.mlp.up_proj.weight' is missing" in message


def test_gguf_unknown_architecture(tiny_mistral_dir, tmp_path):
    path = write_tiny_gguf(tmp_path / "odd.gguf", tiny_mistral_dir, arch="gpt2")
    message = _load_error(path)
    assert str(path) in message and "architecture 'gpt2' is not supported" in message


def test_gguf_unsupported_quant_type(tiny_mistral_dir, tmp_path):
    overrides = {"blk.0.ffn_up.weight": Q.Q5_0}
    path = write_tiny_gguf(tmp_path / "q5.gguf", tiny_mistral_dir, type_overrides=overrides)
    message = _load_error(path)
    assert str(path) in message and "'blk.0.ffn_up.weight'" in message and "Q5_0" in message


def test_gguf_truncated(tiny_mistral_dir, tmp_path):
    path = write_tiny_gguf(tmp_path / "cut.gguf", tiny_mistral_dir)
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size // 2)
    message = _load_error(path)
    assert str(path) in message and "not a readable GGUF file" in message


# --- config validation and naming ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("hidden_size", 0),
        ("num_key_value_heads", 3),
        ("head_dim", 15),
        ("rms_norm_eps", 0.0),
        ("rope_theta", float("nan")),
        ("model_type", "gpt2"),
        ("qk_norm", 1),
    ],
)
def test_model_config_validation_names_field(tiny_llama_dir, field, value):
    config = load_model(tiny_llama_dir).config
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(config, **{field: value})


def test_rope_scaling_validation():
    with pytest.raises(ValueError, match="rope_type"):
        RopeScaling("yarn", 8.0, 1.0, 4.0, 8192)
    with pytest.raises(ValueError, match="high_freq_factor"):
        RopeScaling("llama3", 8.0, 4.0, 1.0, 8192)


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/m/SmolLM2-135M-Instruct.Q4_1.gguf", "SmolLM2-135M-Instruct"),
        ("/m/qwen2-0_5b-instruct-q4_k_m.gguf", "qwen2-0_5b-instruct"),
        ("/m/model-BF16.gguf", "model"),
        ("/m/plain.gguf", "plain"),
        ("/m/Llama-3.2-1B/", "Llama-3.2-1B"),
    ],
)
def test_model_name_from_path(path, name):
    assert model_name_from_path(path) == name
