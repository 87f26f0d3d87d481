"""The layer-wise float32 reference of benchmarks/gpu_agreement.py (`widened`): transformers'
model held in bfloat16 and widened one decoder layer at a time computes, bit for bit, what the
same model built in float32 on the widened weights computes (CPU, tiny mixtures of experts),
and leaves the model in bfloat16 afterwards."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from samebits.model import load_model

_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(_DIR))
_spec = importlib.util.spec_from_file_location("gpu_agreement", _DIR / "gpu_agreement.py")
agreement = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(agreement)


def _in(loaded, dtype):
    return dataclasses.replace(loaded, weights={k: v.to(dtype) for k, v in loaded.weights.items()})


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen3_moe_mixed", "mixtral"])
def test_widened_model_equals_the_float32_model(request, arch):
    loaded = load_model(request.getfixturevalue(f"tiny_{arch}_dir"))
    low = _in(loaded, torch.bfloat16)
    ids = agreement.random_prompt(loaded.config.vocab_size, 24, seed=1)
    fp32 = agreement.hf_model(_in(low, torch.float32), "cpu", torch.float32)
    fp32.config._experts_implementation = "eager"  # as `widened` runs the experts
    ref = agreement.hf_logits(fp32, ids)
    model = agreement.hf_model(low, "cpu", torch.bfloat16, consume=True)
    narrow = agreement.hf_logits(model, ids)
    with agreement.widened(model, torch.bfloat16):
        wide = agreement.hf_logits(model, ids)
    assert np.array_equal(wide.view(np.int32), ref.view(np.int32))
    assert not np.array_equal(narrow.view(np.int32), ref.view(np.int32))  # bf16 compute differs
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert getattr(model.config, "_experts_implementation", None) != "eager"  # restored
