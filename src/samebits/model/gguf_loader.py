"""Load a llama-architecture GGUF file: config from metadata, dequantized weights, tokenizer.

GGUF stores shapes fastest-dimension first, so a `[in, out]` GGUF shape is HF's `(out, in)`.
llama.cpp's converter permutes the rows of q_proj and k_proj (per head, the two RoPE halves are
interleaved for its pairwise RoPE); `unpermute_qk` undoes that so the weights work with HF's
rotate-half RoPE. Dequantization is `gguf.quants.dequantize` (the same code transformers'
GGUF loader runs), and the permutation is pure data movement, so values are bitwise those of
`transformers.AutoModelForCausalLM.from_pretrained(..., gguf_file=...)`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import tokenizers
import torch
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize as gguf_dequantize

from samebits.kernels.quantized import QuantizedTensor
from samebits.model.checkpoint import LoadedModel, TensorEntry, model_name_from_path, read_weights
from samebits.model.config import ModelConfig, YarnRopeScaling
from samebits.model.errors import ModelLoadError
from samebits.model.tokenizer import Tokenizer, byte_level_bpe

SUPPORTED_TYPES = frozenset(
    GGMLQuantizationType[name]
    for name in ("F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q4_K", "Q6_K")
)
_LAYER_TENSORS = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_LAYER_NAME = re.compile(r"blk\.(\d+)\.(\w+)\.weight")
_CONTROL, _USER_DEFINED = 3, 4  # llama.cpp token types
_MISSING = object()


def load_gguf(path: str | Path, progress: bool = False) -> LoadedModel:
    """Load a llama GGUF; `ModelLoadError` naming the file for anything unsupported."""
    path = Path(path).absolute()
    reader = _open(path)
    config = gguf_model_config(reader, path)
    entries = gguf_entries(reader, config, path)
    tokenizer = gguf_tokenizer(reader, path)
    weights = read_weights(entries, config, path, progress)
    quantized = gguf_blocks(reader, config)
    name = model_name_from_path(path)
    return LoadedModel(config, weights, tokenizer, name, (str(path),), quantized)


def gguf_config(path: str | Path) -> ModelConfig:
    """The ModelConfig a GGUF file's metadata describes (no tensor is read)."""
    path = Path(path)
    return gguf_model_config(_open(path), path)


def _open(path: Path) -> GGUFReader:
    try:
        return GGUFReader(path)
    except Exception as exc:  # the reader raises ValueError/struct.error/... on corrupt files
        raise ModelLoadError(path, f"not a readable GGUF file ({exc})") from None


def _field(reader: GGUFReader, key: str, path: Path, default: Any = _MISSING) -> Any:
    field = reader.fields.get(key)
    if field is None:
        if default is _MISSING:
            raise ModelLoadError(path, f"GGUF metadata key {key!r} is missing")
        return default
    return field.contents()


def gguf_model_config(reader: GGUFReader, path: Path) -> ModelConfig:
    """`ModelConfig` from `llama.*` metadata; vocab size is the tokenizer's token count."""
    arch = _field(reader, "general.architecture", path)
    if arch != "llama":
        raise ModelLoadError(path, f"GGUF architecture {arch!r} is not supported (only 'llama')")
    rope_scaling = gguf_rope_scaling(reader, path)
    heads = _int_field(reader, "llama.attention.head_count", path)
    hidden = _int_field(reader, "llama.embedding_length", path)
    head_dim = _int_field(reader, "llama.attention.key_length", path, hidden // max(heads, 1))
    rope_dim = _int_field(reader, "llama.rope.dimension_count", path, head_dim)
    if rope_dim != head_dim:
        raise ModelLoadError(path, f"partial RoPE (dimension_count {rope_dim} != {head_dim})")
    tensor_names = {t.name for t in reader.tensors}
    try:
        return ModelConfig(
            model_type="llama",
            vocab_size=len(_field(reader, "tokenizer.ggml.tokens", path)),
            hidden_size=hidden,
            intermediate_size=_int_field(reader, "llama.feed_forward_length", path),
            num_hidden_layers=_int_field(reader, "llama.block_count", path),
            num_attention_heads=heads,
            num_key_value_heads=_int_field(reader, "llama.attention.head_count_kv", path, heads),
            head_dim=head_dim,
            rms_norm_eps=float(_field(reader, "llama.attention.layer_norm_rms_epsilon", path)),
            rope_theta=float(_field(reader, "llama.rope.freq_base", path, 10000.0)),
            rope_scaling=rope_scaling,
            max_position_embeddings=_int_field(reader, "llama.context_length", path),
            tie_word_embeddings="output.weight" not in tensor_names,
            attention_bias=False,
            qk_norm=False,
        )
    except ValueError as exc:
        raise ModelLoadError(path, str(exc)) from None


def _int_field(reader: GGUFReader, key: str, path: Path, default: Any = _MISSING) -> int:
    value = _field(reader, key, path, default)
    if not isinstance(value, int | np.integer) or isinstance(value, bool):
        raise ModelLoadError(path, f"GGUF metadata {key!r} must be one integer, got {value!r}")
    return int(value)


# llama.cpp's yarn modifiers that YarnRopeScaling does not model (refused when present)
_YARN_UNSUPPORTED = ("attn_factor", "yarn_log_multiplier", "yarn_ext_factor", "yarn_attn_factor")


def gguf_rope_scaling(reader: GGUFReader, path: Path) -> YarnRopeScaling | None:
    """The RoPE scaling of `llama.rope.scaling.*`: none, or yarn (`factor`,
    `original_context_length`, optional `yarn_beta_fast` / `yarn_beta_slow`). Any other type,
    a yarn modifier not modelled, or frequency factors (`rope_freqs.weight`, llama3) is a
    ModelLoadError naming it."""
    scaling = _field(reader, "llama.rope.scaling.type", path, "none")
    if any(t.name == "rope_freqs.weight" for t in reader.tensors):
        raise ModelLoadError(path, "RoPE frequency factors (rope_freqs.weight) are not supported")
    if scaling == "none":
        return None
    if scaling != "yarn":
        raise ModelLoadError(
            path, f"RoPE scaling {scaling!r} is not supported for GGUF (only 'none', 'yarn')"
        )
    for name in _YARN_UNSUPPORTED:
        if f"llama.rope.scaling.{name}" in reader.fields:
            raise ModelLoadError(path, f"yarn RoPE scaling with {name!r} is not supported")
    key = "llama.rope.scaling."
    try:
        return YarnRopeScaling(
            rope_type="yarn",
            factor=float(_field(reader, key + "factor", path)),
            original_max_position_embeddings=_int_field(
                reader, key + "original_context_length", path
            ),
            beta_fast=float(_field(reader, key + "yarn_beta_fast", path, 32.0)),
            beta_slow=float(_field(reader, key + "yarn_beta_slow", path, 1.0)),
        )
    except ValueError as exc:
        raise ModelLoadError(path, str(exc)) from None


def gguf_entries(reader: GGUFReader, config: ModelConfig, path: Path) -> dict[str, TensorEntry]:
    """`TensorEntry` per HF weight name; rejects unknown tensors and unsupported types."""
    entries: dict[str, TensorEntry] = {}
    for tensor in reader.tensors:
        name = hf_tensor_name(tensor.name)
        if name is None:
            raise ModelLoadError(path, f"unexpected tensor {tensor.name!r}")
        qtype = GGMLQuantizationType(tensor.tensor_type)
        if qtype not in SUPPORTED_TYPES:
            raise ModelLoadError(
                path,
                f"tensor {tensor.name!r} has unsupported type {qtype.name} "
                f"(supported: {sorted(t.name for t in SUPPORTED_TYPES)})",
            )
        shape = tuple(int(d) for d in reversed(tensor.shape.tolist()))
        entries[name] = TensorEntry(shape, str(path), _reader(tensor.data, qtype, name, config))
    return entries


def hf_tensor_name(gguf_name: str) -> str | None:
    """HF weight name of a llama GGUF tensor name, or None if it is not one we know."""
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    match = _LAYER_NAME.fullmatch(gguf_name)
    if match is None or match.group(2) not in _LAYER_TENSORS:
        return None
    return f"model.layers.{match.group(1)}.{_LAYER_TENSORS[match.group(2)]}.weight"


def _reader(data: np.ndarray, qtype: GGMLQuantizationType, name: str, config: ModelConfig):
    def read() -> torch.Tensor:
        return _unpermute_for(name, dequantize(data, qtype), config)

    return read


KEPT_BLOCK_TYPES = frozenset(GGMLQuantizationType[name] for name in ("Q4_1", "Q8_0", "F16", "BF16"))


def gguf_blocks(reader: GGUFReader, config: ModelConfig) -> dict[str, QuantizedTensor]:
    """The Q4_1 / Q8_0 / F16 / BF16 matrices' stored rows by HF name, in HF row order (q/k
    un-permuted like their float32 weights), for kernels that read them."""
    blocks: dict[str, QuantizedTensor] = {}
    for tensor in reader.tensors:
        qtype = GGMLQuantizationType(tensor.tensor_type)
        name = hf_tensor_name(tensor.name)
        if qtype not in KEPT_BLOCK_TYPES or name is None or len(tensor.shape) != 2:
            continue
        shape = (int(tensor.shape[1]), int(tensor.shape[0]))
        raw = np.array(tensor.data).view(np.uint8).reshape(shape[0], -1)
        rows = _unpermute_for(name, torch.from_numpy(raw), config)
        blocks[name] = QuantizedTensor(qtype.name, shape, rows)
    return blocks


def _unpermute_for(name: str, rows: torch.Tensor, config: ModelConfig) -> torch.Tensor:
    if name.endswith("self_attn.q_proj.weight"):
        return unpermute_qk(rows, config.num_attention_heads)
    if name.endswith("self_attn.k_proj.weight"):
        return unpermute_qk(rows, config.num_key_value_heads)
    return rows


def dequantize(data: np.ndarray, qtype: GGMLQuantizationType) -> torch.Tensor:
    """Float32 values of a GGUF tensor's raw data, in HF (row-major, out-first) layout."""
    values = gguf_dequantize(data, qtype)
    if qtype == GGMLQuantizationType.F32:  # a view of the read-only memory map: own a copy
        values = values.copy()
    return torch.from_numpy(values)


def unpermute_qk(weight: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Undo llama.cpp's q/k row permutation: per head, rows stored as interleaved pairs
    (r0, r_half, r1, r_half+1, ...) go back to HF's halves order (r0, r1, ..., r_half, ...)."""
    rows = weight.shape[0]
    pairs = weight.reshape(num_heads, rows // num_heads // 2, 2, *weight.shape[1:])
    return pairs.transpose(1, 2).reshape(weight.shape).contiguous()


def gguf_tokenizer(reader: GGUFReader, path: Path) -> Tokenizer:
    """Byte-level BPE tokenizer, special tokens, bos/eos ids and chat template from metadata."""
    kind = _field(reader, "tokenizer.ggml.model", path)
    if kind != "gpt2":
        raise ModelLoadError(path, f"tokenizer.ggml.model {kind!r} is not supported (only 'gpt2')")
    tokens = _field(reader, "tokenizer.ggml.tokens", path)
    types = _field(reader, "tokenizer.ggml.token_type", path, [])
    bos_id = _field(reader, "tokenizer.ggml.bos_token_id", path, None)
    add_bos = bool(_field(reader, "tokenizer.ggml.add_bos_token", path, False))
    try:
        backend = byte_level_bpe(
            tokens,
            _field(reader, "tokenizer.ggml.merges", path),
            pre_tokenizer=_field(reader, "tokenizer.ggml.pre", path, "default"),
            special_ids=[i for i, kind in enumerate(types) if kind == _CONTROL],
            user_defined_ids=[i for i, kind in enumerate(types) if kind == _USER_DEFINED],
            bos_id=bos_id if add_bos else None,
        )
        return _tokenizer(reader, path, backend, tokens, bos_id)
    except (ValueError, IndexError) as exc:
        raise ModelLoadError(path, f"bad tokenizer metadata ({exc})") from None


def _tokenizer(
    reader: GGUFReader,
    path: Path,
    backend: tokenizers.Tokenizer,
    tokens: list[str],
    bos_id: int | None,
) -> Tokenizer:
    eos_id = _field(reader, "tokenizer.ggml.eos_token_id", path, None)
    eot_id = _field(reader, "tokenizer.ggml.eot_token_id", path, None)
    eos_ids = [i for i in (eos_id, eot_id) if i is not None]
    return Tokenizer(
        backend,
        chat_template=_field(reader, "tokenizer.chat_template", path, None),
        eos_token_ids=eos_ids,
        bos_token_id=bos_id,
        bos_token=None if bos_id is None else tokens[bos_id],
        eos_token=None if eos_id is None else tokens[eos_id],
    )
