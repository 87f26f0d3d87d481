"""Correctness against a peer: samebits logits agree with HF transformers in float32 to
max|Δ| / max|ref| <= 1e-4 at every position of a 32-token prompt (both kernel plans), dense
models and mixtures of experts (qwen3_moe renormalized and not, with dense layers placed by
mlp_only_layers / decoder_sparse_step; mixtral); the MoE routing (each token's top-k experts,
in order) equals transformers' at every sparse layer."""

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


MOE_ARCHS = ["qwen3_moe", "qwen3_moe_mixed", "mixtral"]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "mistral", *MOE_ARCHS])
@pytest.mark.parametrize("plan", ["invariant", "fast"])
def test_tiny_checkpoints_agree_with_transformers(request, arch, plan):
    from transformers import AutoModelForCausalLM

    path = request.getfixturevalue(f"tiny_{arch}_dir")
    hf = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    dep = build_deployment(load_model(path), plan)
    _assert_agrees(dep, hf, _prompt(dep.config.vocab_size))


def _our_routing(dep, ids: list[int]) -> list[torch.Tensor]:
    """The expert ids [32, k] our forward picks at each sparse layer, in layer order."""
    ops, seen = dep.model.ops, []
    route = ops.moe_route

    def recording(logits, top_k, normalize):
        out = route(logits, top_k, normalize)
        seen.append(out[0].clone())
        return out

    ops.moe_route = recording
    try:
        cold_logits(dep, ids, all_rows=True)
    finally:
        del ops.moe_route
    return seen


def _hf_routing(model, ids: list[int], top_k: int) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model(torch.tensor([ids]), output_router_logits=True)
    probs = [torch.softmax(r.reshape(len(ids), -1).float(), dim=-1) for r in out.router_logits]
    return [torch.topk(p, top_k, dim=-1).indices for p in probs]


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_moe_routing_agrees_with_transformers(request, arch):
    """Every token's top-k experts, in rank order, at every sparse layer: equal to
    transformers' (random logits have no near-ties here; a near-tie could differ)."""
    from transformers import AutoModelForCausalLM

    path = request.getfixturevalue(f"tiny_{arch}_dir")
    hf = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    dep = build_deployment(load_model(path), "invariant")
    ids = _prompt(dep.config.vocab_size, seed=1)
    ours = _our_routing(dep, ids)
    theirs = _hf_routing(hf, ids, dep.config.moe.num_experts_per_tok)
    sparse = [i for i in range(dep.config.num_hidden_layers) if dep.config.is_sparse(i)]
    assert len(ours) == len(theirs) == len(sparse)
    pairs = zip(ours, theirs, strict=True)
    equal = sum(int(torch.equal(a[t], b[t])) for a, b in pairs for t in range(32))
    assert equal == 32 * len(sparse), f"routing equal for {equal} of {32 * len(sparse)} tokens"


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
