"""The embedded SmolLM2 runs its linears on the GGUF blocks (Q4_1 layers, Q8_0 tied head),
and gives bitwise the logits of the same deployment built on float32 weights — the same
fingerprint too, since the weights' values are the same."""

from __future__ import annotations

import dataclasses

from samebits.bits import same_bits
from samebits.deployment import build_deployment
from samebits.engine.runner import cold_logits


def test_smollm2_reads_quantized_blocks_with_float32_bits(smollm2_model):
    quantized = build_deployment(smollm2_model, "invariant", num_threads=2)
    dense = build_deployment(dataclasses.replace(smollm2_model, quantized={}), "invariant", 2)
    layer = quantized.model.layers[0]
    formats = [lin.format for lin in (layer.qkv, layer.o, layer.gate_up, layer.down)]
    assert formats == ["Q4_1"] * 4 and quantized.model.lm_head.format == "Q8_0"
    assert dense.model.layers[0].qkv.format == "F32" and dense.model.lm_head.format == "F32"
    ids = smollm2_model.tokenizer.encode("Paris is the capital of France, and Rome " * 3)[:24]
    ours = cold_logits(quantized, ids, all_rows=True)
    theirs = cold_logits(dense, ids, all_rows=True)
    assert same_bits(ours, theirs)
    assert quantized.fingerprint == dense.fingerprint
