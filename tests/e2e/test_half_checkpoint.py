"""A bfloat16 HF checkpoint runs its linears on the stored bfloat16 values and gives bitwise the
logits (and the fingerprint) of the same deployment built on float32 weights."""

from __future__ import annotations

import dataclasses

import torch

from samebits.bits import same_bits
from samebits.deployment import build_deployment
from samebits.engine.runner import cold_logits
from samebits.model import load_model
from tiny_models import make_tiny_checkpoint


def test_bf16_checkpoint_reads_stored_values_with_float32_bits(tmp_path):
    folder = make_tiny_checkpoint(tmp_path / "tiny-bf16", "qwen2", seed=3, dtype=torch.bfloat16)
    loaded = load_model(folder)
    assert loaded.quantized and {q.qtype for q in loaded.quantized.values()} == {"BF16"}
    stored = build_deployment(loaded, "invariant", num_threads=2)
    dense = build_deployment(dataclasses.replace(loaded, quantized={}), "invariant", 2)
    layer = stored.model.layers[0]
    assert [lin.format for lin in (layer.qkv, layer.o, layer.gate_up, layer.down)] == ["BF16"] * 4
    assert dense.model.layers[0].qkv.format == "F32"
    ids = list(range(3, 40))
    ours = cold_logits(stored, ids, all_rows=True)
    theirs = cold_logits(dense, ids, all_rows=True)
    assert same_bits(ours, theirs)
    assert stored.fingerprint == dense.fingerprint


def test_mixed_gguf_reads_f16_bf16_and_blocks_with_float32_bits(tmp_path, tiny_llama_dir):
    """A GGUF mixing F16, BF16, Q8_0 and Q4_1 matrices (and F32 ones the kernel keeps as
    float32): each linear reads its stored form, the logits equal the float32 build's bits
    (q/k rows un-permuted in stored form exactly like the float32 weights)."""
    from gguf import GGMLQuantizationType as Q

    from tiny_models import write_tiny_gguf

    overrides = {"blk.0.attn_q.weight": Q.BF16, "blk.0.attn_k.weight": Q.BF16,
                 "blk.0.attn_v.weight": Q.BF16, "blk.0.ffn_down.weight": Q.Q8_0,
                 "blk.1.attn_output.weight": Q.Q4_1, "blk.1.ffn_gate.weight": Q.F32}  # fmt: skip
    path = write_tiny_gguf(tmp_path / "mixed.gguf", tiny_llama_dir, Q.F16, overrides)
    loaded = load_model(path)
    stored = build_deployment(loaded, "invariant", num_threads=2)
    dense = build_deployment(dataclasses.replace(loaded, quantized={}), "invariant", 2)
    first, second = stored.model.layers[0], stored.model.layers[1]
    assert (first.qkv.format, first.down.format, first.o.format) == ("BF16", "Q8_0", "F16")
    assert (second.o.format, second.gate_up.format) == ("Q4_1", "F32")  # gate F32, up F16
    ids = list(range(5, 37))
    ours = cold_logits(stored, ids, all_rows=True)
    theirs = cold_logits(dense, ids, all_rows=True)
    assert same_bits(ours, theirs)
