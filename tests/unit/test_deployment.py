"""build_deployment: releasing the source weights changes neither the fingerprint nor a bit."""

from __future__ import annotations

from samebits.bits import same_bits
from samebits.deployment import build_deployment
from samebits.engine.runner import cold_logits
from samebits.model import load_model


def test_release_sources_keeps_fingerprint_and_logits(tiny_llama_dir):
    kept = build_deployment(load_model(tiny_llama_dir), "invariant", 2)
    owned = load_model(tiny_llama_dir)
    released = build_deployment(owned, "invariant", 2, release_sources=True)
    assert "model.layers.0.self_attn.q_proj.weight" not in owned.weights
    assert "model.layers.1.mlp.down_proj.weight" not in owned.weights
    assert "model.embed_tokens.weight" in owned.weights
    assert released.fingerprint == kept.fingerprint
    ids = list(range(3, 40))
    assert same_bits(
        cold_logits(released, ids, all_rows=True), cold_logits(kept, ids, all_rows=True)
    )
