"""What a loaded checkpoint is, and the shape check every loader runs before reading data.

Both loaders (HF safetensors folder, GGUF) describe the file's tensors as `TensorEntry`s keyed
by HF weight names; `read_weights` checks them against `expected_weight_shapes(config)` and only
then reads and converts them, so a bad checkpoint fails before any large read.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from samebits.kernels.quantized import QuantizedTensor
from samebits.model.config import MOE_WEIGHT_NAMES, ModelConfig
from samebits.model.errors import ModelLoadError
from samebits.model.tokenizer import Tokenizer


@dataclass(frozen=True)
class LoadedModel:
    """A model ready for the runner.

    Invariants: `weights` holds exactly the names of `expected_weight_shapes(config)`, each a
    contiguous float32 CPU tensor of that shape (`lm_head.weight` is absent when
    `config.tie_word_embeddings`); `source_files` lists every file read, in read order;
    `quantized` holds, for some of those names, the checkpoint's stored form that widens
    bitwise to the float32 weight (GGUF Q4_1 / Q8_0 blocks, bfloat16 / float16 values), for
    kernels that read it. A generated model (`samebits.model.random_init`) may instead hold
    its weights in another dtype on another device (e.g. bfloat16 on CUDA); it then names
    them by `weights_identity` (its generator recipe), which replaces the SHA-256 of the
    bytes in the fingerprint.
    """

    config: ModelConfig
    weights: dict[str, torch.Tensor]
    tokenizer: Tokenizer
    name: str
    source_files: tuple[str, ...]
    quantized: dict[str, QuantizedTensor] = field(default_factory=dict)
    weights_identity: str = ""


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a checkpoint, not read yet: its HF-layout shape, its file, a reader."""

    shape: tuple[int, ...]
    file: str
    read: Callable[[], torch.Tensor]


def expected_weight_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every weight the decoder needs, by HF name, with its shape (out_features first)."""
    hidden, vocab = config.hidden_size, config.vocab_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (vocab, hidden)}
    for layer in range(config.num_hidden_layers):
        shapes.update(_layer_shapes(config, layer))
    shapes["model.norm.weight"] = (hidden,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (vocab, hidden)
    return shapes


def _layer_shapes(config: ModelConfig, layer: int) -> dict[str, tuple[int, ...]]:
    prefix = f"model.layers.{layer}."
    hidden, inter = config.hidden_size, config.intermediate_size
    q_size, kv_size = config.q_size, config.kv_size
    attn = prefix + "self_attn."
    shapes: dict[str, tuple[int, ...]] = {
        prefix + "input_layernorm.weight": (hidden,),
        attn + "q_proj.weight": (q_size, hidden),
        attn + "k_proj.weight": (kv_size, hidden),
        attn + "v_proj.weight": (kv_size, hidden),
        attn + "o_proj.weight": (hidden, q_size),
    }
    if config.attention_bias:
        shapes[attn + "q_proj.bias"] = (q_size,)
        shapes[attn + "k_proj.bias"] = (kv_size,)
        shapes[attn + "v_proj.bias"] = (kv_size,)
    if config.qk_norm:
        shapes[attn + "q_norm.weight"] = (config.head_dim,)
        shapes[attn + "k_norm.weight"] = (config.head_dim,)
    shapes[prefix + "post_attention_layernorm.weight"] = (hidden,)
    if config.gemma3 is not None:  # Gemma 3: norms before and after the MLP too
        shapes[prefix + "pre_feedforward_layernorm.weight"] = (hidden,)
        shapes[prefix + "post_feedforward_layernorm.weight"] = (hidden,)
    if config.is_sparse(layer):
        shapes.update(_moe_shapes(config, prefix))
        return shapes
    shapes[prefix + "mlp.gate_proj.weight"] = (inter, hidden)
    shapes[prefix + "mlp.up_proj.weight"] = (inter, hidden)
    shapes[prefix + "mlp.down_proj.weight"] = (hidden, inter)
    return shapes


def moe_weight_names(config: ModelConfig, prefix: str) -> tuple[str, list[tuple[str, str, str]]]:
    """(router, [(gate, up, down) of expert e for e in 0..num_experts-1]): the checkpoint names
    of the sparse layer at `prefix` ("model.layers.<i>."), see `config.MOE_WEIGHT_NAMES`."""
    names, moe = MOE_WEIGHT_NAMES[config.model_type], config.moe
    block = f"{prefix}{names.block}."
    experts = [
        tuple(f"{block}experts.{e}.{p}.weight" for p in (names.gate, names.up, names.down))
        for e in range(moe.num_experts)
    ]
    return f"{block}gate.weight", experts


def _moe_shapes(config: ModelConfig, prefix: str) -> dict[str, tuple[int, ...]]:
    hidden, inter = config.hidden_size, config.moe.moe_intermediate_size
    router, experts = moe_weight_names(config, prefix)
    shapes: dict[str, tuple[int, ...]] = {router: (config.moe.num_experts, hidden)}
    for gate, up, down in experts:
        shapes.update({gate: (inter, hidden), up: (inter, hidden), down: (hidden, inter)})
    return shapes


def check_entries(
    entries: Mapping[str, TensorEntry], config: ModelConfig, checkpoint: str | os.PathLike
) -> dict[str, tuple[int, ...]]:
    """Raise `ModelLoadError` for a missing, misshapen or unexpected tensor; return the plan."""
    expected = expected_weight_shapes(config)
    for name, shape in expected.items():
        entry = entries.get(name)
        if entry is None:
            raise ModelLoadError(checkpoint, f"tensor {name!r} is missing")
        if entry.shape != shape:
            raise ModelLoadError(
                entry.file,
                f"tensor {name!r} has shape {list(entry.shape)}, expected {list(shape)}",
            )
    unexpected = [name for name in entries if name not in expected]
    if unexpected:
        entry = entries[unexpected[0]]
        raise ModelLoadError(entry.file, f"unexpected tensor {unexpected[0]!r}")
    return expected


def read_weights(
    entries: Mapping[str, TensorEntry],
    config: ModelConfig,
    checkpoint: str | os.PathLike,
    progress: bool = False,
    kept: dict[str, QuantizedTensor] | None = None,
) -> dict[str, torch.Tensor]:
    """Check every entry, then read each into a contiguous float32 tensor (HF name order).

    With `kept`, each bfloat16 / float16 matrix's stored values also go there (kernels can
    read them; they widen exactly to the float32 weight)."""
    expected = check_entries(entries, config, checkpoint)
    weights: dict[str, torch.Tensor] = {}
    bar = tqdm(expected, desc="Loading weights", unit="tensor", disable=not progress)
    for name in bar:
        weights[name] = _as_float32(entries[name], name, kept)
    return weights


@dataclass(frozen=True)
class WeightTarget:
    """Where a loader puts the weights when a deployment wants them off the CPU path: each
    tensor converted on the host to `dtype` (a no-op for a checkpoint stored in it, e.g. a
    bfloat16 checkpoint for a bfloat16 GPU plan) and copied to `device`, one at a time."""

    device: str
    dtype: str  # a torch dtype name, e.g. "bfloat16"


def read_weights_to(
    entries: Mapping[str, TensorEntry],
    config: ModelConfig,
    checkpoint: str | os.PathLike,
    target: WeightTarget,
    progress: bool = False,
) -> tuple[dict[str, torch.Tensor], str]:
    """Like `read_weights`, but each tensor goes straight to `target` without a float32 copy
    of the whole model. Returns (weights, identity): the identity is a SHA-256 over, in sorted
    name order, each tensor's name, dtype, shape and the SHA-256 of its bytes as loaded."""
    expected = check_entries(entries, config, checkpoint)
    weights: dict[str, torch.Tensor] = {}
    digests: dict[str, str] = {}
    bar = tqdm(expected, desc="Loading weights", unit="tensor", disable=not progress)
    for name in bar:
        host = _checked(entries[name], name).to(getattr(torch, target.dtype)).contiguous()
        digests[name] = hashlib.sha256(host.view(torch.uint8).numpy().tobytes()).hexdigest()
        weights[name] = host.to(target.device)
    return weights, _identity(weights, digests)


def _identity(weights: Mapping[str, torch.Tensor], digests: Mapping[str, str]) -> str:
    h = hashlib.sha256()
    for name in sorted(weights):
        t = weights[name]
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}|{digests[name]}\n".encode())
    return "sha256-of-tensors:" + h.hexdigest()


_HALF_DTYPES = {torch.bfloat16: "BF16", torch.float16: "F16"}


def _checked(entry: TensorEntry, name: str) -> torch.Tensor:
    """The entry's tensor as read, after the float-dtype and shape checks."""
    tensor = entry.read()
    if not tensor.is_floating_point():
        raise ModelLoadError(entry.file, f"tensor {name!r} has non-float dtype {tensor.dtype}")
    if tuple(tensor.shape) != entry.shape:
        raise ModelLoadError(
            entry.file,
            f"tensor {name!r} read as {list(tensor.shape)}, expected {list(entry.shape)}",
        )
    return tensor


def _as_float32(
    entry: TensorEntry, name: str, kept: dict[str, QuantizedTensor] | None
) -> torch.Tensor:
    tensor = _checked(entry, name)
    if kept is not None and tensor.dim() == 2 and tensor.dtype in _HALF_DTYPES:
        rows = tensor.contiguous().view(torch.uint8)
        kept[name] = QuantizedTensor(_HALF_DTYPES[tensor.dtype], entry.shape, rows)
    return tensor.to(torch.float32).contiguous()


_QUANT_SUFFIX = re.compile(r"[.\-_](?:I?Q\d[A-Z0-9_]*|F16|F32|BF16)$", re.IGNORECASE)


def model_name_from_path(path: str | os.PathLike) -> str:
    """API model name: a folder's name, or a GGUF file's stem without its quant suffix.

    `SmolLM2-135M-Instruct.Q4_1.gguf` -> `SmolLM2-135M-Instruct`.
    """
    base = os.path.basename(os.path.normpath(os.fspath(path)))
    if base.lower().endswith(".gguf"):
        base = _QUANT_SUFFIX.sub("", base[: -len(".gguf")])
    return base
