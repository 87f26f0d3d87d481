"""Loading a HF folder straight to a GPU plan's dtype: every tensor arrives in that dtype with
the checkpoint's stored bits (no float32 copy of the model), and the weights identity names
the loaded bytes (equal for equal content, different for different content)."""

from __future__ import annotations

import torch
from safetensors.torch import load_file

from samebits.bits import same_bits
from samebits.model import WeightTarget, load_model
from tiny_models import make_tiny_checkpoint


def test_bf16_checkpoint_loads_stored_bits_in_bf16(tmp_path):
    folder = make_tiny_checkpoint(tmp_path / "bf16", "qwen3", seed=5, dtype=torch.bfloat16)
    loaded = load_model(folder, weights_to=WeightTarget("cpu", "bfloat16"))
    stored = {}
    for shard in sorted(folder.glob("*.safetensors")):
        stored.update(load_file(shard))
    assert set(loaded.weights) <= set(stored)
    for name, tensor in loaded.weights.items():
        assert tensor.dtype == torch.bfloat16, name
        assert same_bits(tensor, stored[name]), name
    assert loaded.quantized == {}
    assert loaded.weights_identity.startswith("sha256-of-tensors:")


def test_identity_follows_content(tmp_path):
    target = WeightTarget("cpu", "bfloat16")
    a = make_tiny_checkpoint(tmp_path / "a", "llama", seed=1, dtype=torch.bfloat16)
    b = make_tiny_checkpoint(tmp_path / "b", "llama", seed=1, dtype=torch.bfloat16)
    c = make_tiny_checkpoint(tmp_path / "c", "llama", seed=2, dtype=torch.bfloat16)
    ids = [load_model(p, weights_to=target).weights_identity for p in (a, b, c)]
    assert ids[0] == ids[1] != ids[2]
