"""Tiny random checkpoints for tests: HF folders made with transformers, and GGUF copies.

`make_tiny_checkpoint` writes a real HF folder (config.json, safetensors, tokenizer.json,
tokenizer_config.json or chat_template.jinja, generation_config.json) for a 2-layer model of
each supported architecture. Every parameter, norms and biases included, is drawn from a
seeded generator, so a name or layout mix-up in a loader changes values. The tokenizer is a
byte-level BPE trained deterministically on inline text, with exactly `TINY_VOCAB` ids.

`write_tiny_gguf` converts such a folder to a llama GGUF the way llama.cpp's converter does
(q/k rows permuted for interleaved RoPE, shapes stored fastest-dimension first).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

ARCHS = ("llama", "qwen2", "qwen3", "mistral")
# Mixtures of experts: qwen3_moe (every layer sparse, weights renormalized), qwen3_moe_mixed
# (4 layers: decoder_sparse_step 2 and mlp_only_layers [3] leave layer 1 the only sparse one;
# weights not renormalized) and mixtral.
MOE_ARCHS = ("qwen3_moe", "qwen3_moe_mixed", "mixtral")
# Gemma 3 text (gemma3_text): 4 layers, sliding / global / sliding / sliding, a window of
# GEMMA_WINDOW keys (prompts cross it), linear RoPE scaling on the global layer, a local RoPE
# base, query_pre_attn_scalar != head_dim, tied embeddings, 1024 positions (prompts past the
# 512-key attention span).
GEMMA_ARCHS = ("gemma3_text",)
GEMMA_WINDOW = 40
GEMMA_LAYER_TYPES = (
    "sliding_attention",
    "full_attention",
    "sliding_attention",
    "sliding_attention",
)
TINY_VOCAB = 320
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('unknown role: ' + message['role']) }}"
    "{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
_TRAINING_TEXT = (
    "The quick brown fox jumps over the lazy dog. " * 3,
    "def add(a, b):\n    return a + b\n",
    "Numbers 12345 and 3.14159, 2024-11-29.",
    "Ünïcödé → 日本語 テキスト 😀 ok",
    "Hello world! Hello there, general.",
    "to be or not to be, that is the question",
)
_DIMS = dict(
    vocab_size=TINY_VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    max_position_embeddings=256,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
)


def train_tiny_tokenizer():
    """A byte-level BPE `tokenizers.Tokenizer` with `TINY_VOCAB` ids; ids 0-2 are specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        min_frequency=1,
        show_progress=False,
    )
    tokenizer.train_from_iterator(_TRAINING_TEXT, trainer)
    assert tokenizer.get_vocab_size() == TINY_VOCAB, tokenizer.get_vocab_size()
    return tokenizer


DETOK_CORPUS = ["Hello world, the quick brown fox jumps over the lazy dog."] * 50 + [
    "héllo wörld"
] * 10


def byte_bpe_tokenizer():
    """A 400-id byte-level BPE trained on `DETOK_CORPUS` (special `<|eos|>`): detokenizer tests."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|eos|>"], show_progress=False,
    )  # fmt: skip
    tokenizer.train_from_iterator(DETOK_CORPUS, trainer)
    return tokenizer


def metaspace_bpe_tokenizer():
    """A 300-id Metaspace BPE with `<unk>` trained on `DETOK_CORPUS`: detokenizer tests."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<unk>", "<|eos|>"], show_progress=False
    )
    tokenizer.train_from_iterator(DETOK_CORPUS, trainer)
    return tokenizer


LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 50000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}


def tiny_hf_config(arch: str, **overrides):
    """The transformers config of the tiny model of `arch`; `overrides` replace `_DIMS`
    entries or add config fields (e.g. `rope_parameters`, `max_position_embeddings`)."""
    import transformers

    dims = {**_DIMS, **overrides}
    if arch == "llama":
        return transformers.LlamaConfig(**{"rope_parameters": LLAMA3_ROPE, **dims})
    if arch == "qwen2":
        return transformers.Qwen2Config(**dims, use_sliding_window=False)
    if arch == "qwen3":
        return transformers.Qwen3Config(**dims, use_sliding_window=False, attention_bias=False)
    if arch == "mistral":
        return transformers.MistralConfig(**dims, sliding_window=None)
    if arch in MOE_ARCHS:
        return _tiny_moe_config(arch)
    if arch == "gemma3_text":
        return tiny_gemma3_config(**overrides)
    raise ValueError(f"arch must be one of {ARCHS + MOE_ARCHS + GEMMA_ARCHS}, got {arch!r}")


def tiny_gemma3_config(**overrides):
    """The tiny Gemma 3 text config (see GEMMA_ARCHS); `overrides` replace its fields."""
    import transformers

    rope = {
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
    }
    fields = dict(
        _DIMS, num_hidden_layers=4, layer_types=list(GEMMA_LAYER_TYPES),
        sliding_window=GEMMA_WINDOW, query_pre_attn_scalar=24, max_position_embeddings=1024,
        tie_word_embeddings=True, rope_parameters=rope, hidden_activation="gelu_pytorch_tanh",
        final_logit_softcapping=None, attn_logit_softcapping=None,
    )  # fmt: skip
    fields.update(overrides)
    return transformers.Gemma3TextConfig(**fields)


def _tiny_moe_config(arch: str):
    import transformers

    if arch == "mixtral":
        dims = dict(_DIMS, intermediate_size=32)  # mixtral's intermediate_size is the experts'
        return transformers.MixtralConfig(
            **dims, num_local_experts=8, num_experts_per_tok=2, sliding_window=None
        )
    moe = dict(use_sliding_window=False, attention_bias=False, moe_intermediate_size=32)
    if arch == "qwen3_moe":
        return transformers.Qwen3MoeConfig(
            **_DIMS, **moe, num_experts=8, num_experts_per_tok=3, norm_topk_prob=True,
            decoder_sparse_step=1, mlp_only_layers=[],
        )  # fmt: skip
    dims = dict(_DIMS, num_hidden_layers=4)
    return transformers.Qwen3MoeConfig(
        **dims, **moe, num_experts=6, num_experts_per_tok=2, norm_topk_prob=False,
        decoder_sparse_step=2, mlp_only_layers=[3],
    )  # fmt: skip


def make_tiny_checkpoint(
    path: Path, arch: str, seed: int = 0, sharded: bool = False, dtype=None, **overrides
) -> Path:
    """Write a tiny random HF checkpoint of `arch` to `path` and return `path`.

    Deterministic in (`arch`, `seed`, `overrides`). `sharded=True` splits the weights over
    several safetensors files with a `model.safetensors.index.json`; `dtype` (e.g.
    torch.bfloat16) stores the weights in that dtype (default float32); `overrides` go to
    `tiny_hf_config` (a long-context RoPE, say).
    """
    import transformers

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = tiny_hf_config(arch, **overrides)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    _randomize(model, seed)
    if dtype is not None:
        model = model.to(dtype)
    model.save_pretrained(path, max_shard_size="100KB" if sharded else "50GB")
    train_tiny_tokenizer().save(str(path / "tokenizer.json"))
    _write_tokenizer_config(path, arch)
    _write_json(path / "generation_config.json", {"eos_token_id": _generation_eos(arch)})
    return path


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Every parameter random (norms around 1), so no two tensors are interchangeable."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            param.copy_(1.0 + 0.1 * noise if "norm" in name else 0.1 * noise)


def _write_tokenizer_config(path: Path, arch: str) -> None:
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "clean_up_tokenization_spaces": False,
    }
    if arch == "mistral":  # exercise the separate-file template
        (path / "chat_template.jinja").write_text(CHATML_TEMPLATE, encoding="utf-8")
    else:
        config["chat_template"] = CHATML_TEMPLATE
    _write_json(path / "tokenizer_config.json", config)


def _generation_eos(arch: str) -> int | list[int]:
    # qwen2 lists several eos ids, as Qwen's own generation_config.json does.
    return [2, 0] if arch == "qwen2" else 2


def _write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def llama_cpp_permute(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """llama.cpp's q/k row order: per head, the two rotate-half halves interleaved."""
    rows = weight.shape[0]
    halves = weight.reshape(num_heads, 2, rows // num_heads // 2, *weight.shape[1:])
    return halves.swapaxes(1, 2).reshape(weight.shape)


_GGUF_LAYER_NAMES = {
    "input_layernorm": "attn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def gguf_tensor_name(hf_name: str) -> str:
    """llama.cpp's name for a HF llama weight name."""
    fixed = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight",
    }
    if hf_name in fixed:
        return fixed[hf_name]
    _, _, layer, rest = hf_name.split(".", 3)
    module = rest.removesuffix(".weight")
    return f"blk.{layer}.{_GGUF_LAYER_NAMES[module]}.weight"


def write_tiny_gguf(
    path: Path,
    hf_dir: Path,
    weight_type=None,
    type_overrides: Mapping[str, object] | None = None,
    arch: str = "llama",
    pre: str = "default",
) -> Path:
    """Convert a tiny llama/mistral HF folder into a GGUF file at `path`.

    `weight_type` (a `gguf.GGMLQuantizationType`, default F32) applies to 2-D weights; norms stay
    F32; `type_overrides` maps a GGUF tensor name to its own type. `arch` is written as
    `general.architecture` (pass something else to make an unsupported file); `pre` is written as
    `tokenizer.ggml.pre`.
    """
    import gguf
    from safetensors.torch import load_file

    config = json.loads((hf_dir / "config.json").read_text())
    weights = load_file(str(hf_dir / "model.safetensors"))
    writer = gguf.GGUFWriter(str(path), arch)
    _write_gguf_metadata(writer, config)
    _write_gguf_tokenizer(writer, hf_dir, pre)
    default_type = weight_type or gguf.GGMLQuantizationType.F32
    for hf_name, tensor in weights.items():
        name = gguf_tensor_name(hf_name)
        values = _llama_cpp_layout(hf_name, tensor.numpy(), config)
        qtype = (type_overrides or {}).get(name, default_type if values.ndim == 2 else None)
        _add_gguf_tensor(writer, name, values, qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _llama_cpp_layout(hf_name: str, values: np.ndarray, config: dict) -> np.ndarray:
    if hf_name.endswith("q_proj.weight"):
        return llama_cpp_permute(values, config["num_attention_heads"])
    if hf_name.endswith("k_proj.weight"):
        return llama_cpp_permute(values, config["num_key_value_heads"])
    return values


def _add_gguf_tensor(writer, name: str, values: np.ndarray, qtype) -> None:
    import gguf

    types = gguf.GGMLQuantizationType
    values = np.ascontiguousarray(values, dtype=np.float32)
    if qtype is None or qtype == types.F32:
        writer.add_tensor(name, values)
    elif qtype == types.F16:
        writer.add_tensor(name, values.astype(np.float16))
    else:
        writer.add_tensor(name, gguf.quants.quantize(values, qtype), raw_dtype=qtype)


def _write_gguf_metadata(writer, config: dict) -> None:
    writer.add_name("tiny")
    writer.add_context_length(config["max_position_embeddings"])
    writer.add_embedding_length(config["hidden_size"])
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(config["num_attention_heads"])
    writer.add_head_count_kv(config["num_key_value_heads"])
    writer.add_layer_norm_rms_eps(config["rms_norm_eps"])
    rope = config.get("rope_parameters") or {}
    writer.add_rope_freq_base(rope.get("rope_theta", config.get("rope_theta", 10000.0)))
    writer.add_rope_dimension_count(config["head_dim"])
    if rope.get("rope_type") == "yarn":  # as llama.cpp's converter writes yarn
        import gguf

        writer.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        writer.add_rope_scaling_factor(rope["factor"])
        writer.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])


def _write_gguf_tokenizer(writer, hf_dir: Path, pre: str) -> None:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    tokens = sorted(vocab, key=vocab.__getitem__)
    merges = json.loads(tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_token_types([3 if token in SPECIAL_TOKENS else 1 for token in tokens])
    writer.add_bos_token_id(vocab["<|im_start|>"])
    writer.add_eos_token_id(vocab["<|im_end|>"])
    writer.add_eot_token_id(vocab["<|endoftext|>"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)
