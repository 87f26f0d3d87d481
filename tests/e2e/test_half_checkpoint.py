"""A bfloat16 HF checkpoint runs its linears on the stored bfloat16 values and gives bitwise the
logits (and the fingerprint) of the same deployment built on float32 weights."""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from samebits.deployment import build_deployment, cold_logits
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
    assert np.array_equal(ours.view(np.int32), theirs.view(np.int32))
    assert stored.fingerprint == dense.fingerprint
