"""Correctness against a peer: samebits logits agree with HF transformers in float32 to
max|Δ| / max|ref| <= 1e-4 at every position of a 32-token prompt (both kernel plans)."""

from __future__ import annotations

import pytest
import torch

from samebits.deployment import build_deployment
from samebits.engine.runner import cold_logits
from samebits.model import load_model

TOL = 1e-4


def _prompt(vocab: int, seed: int = 0) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (32,), generator=gen).tolist()


def _hf_logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def _assert_agrees(dep, hf_model, ids) -> None:
    ours = torch.from_numpy(cold_logits(dep, ids, all_rows=True))
    ref = _hf_logits(hf_model, ids)
    assert ours.shape == ref.shape
    rel = (ours - ref).abs().max() / ref.abs().max()
    assert rel <= TOL, f"relative max error {rel:.3e}"


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "mistral"])
@pytest.mark.parametrize("plan", ["invariant", "fast"])
def test_tiny_checkpoints_agree_with_transformers(request, arch, plan):
    from transformers import AutoModelForCausalLM

    path = request.getfixturevalue(f"tiny_{arch}_dir")
    hf = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    dep = build_deployment(load_model(path), plan)
    _assert_agrees(dep, hf, _prompt(dep.config.vocab_size))


@pytest.fixture(scope="module")
def hf_smollm2(smollm2_gguf):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(
        str(smollm2_gguf.parent), gguf_file=smollm2_gguf.name, torch_dtype=torch.float32
    ).eval()


@pytest.mark.slow
def test_smollm2_gguf_agrees_with_transformers(smollm2_model, hf_smollm2):
    dep = build_deployment(smollm2_model, "invariant")
    ids = smollm2_model.tokenizer.encode("The quick brown fox jumps over the lazy dog. " * 4)[:32]
    assert len(ids) == 32
    _assert_agrees(dep, hf_smollm2, ids)
