"""Correctness against a peer: samebits logits agree with HF transformers in float32 to
max|Δ| / max|ref| <= 1e-4 at every position of a 32-token prompt (both kernel plans), dense
models and mixtures of experts (qwen3_moe renormalized and not, with dense layers placed by
mlp_only_layers / decoder_sparse_step; mixtral), and of a 300-token prompt on long-context
RoPE (yarn, llama3) whose pre-training context is 64; the MoE routing (each token's top-k
experts, in order) equals transformers' at every sparse layer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from samebits.deployment import build_deployment
from samebits.engine.runner import cold_logits
from samebits.model import load_model

TOL = 1e-4


def _prompt(vocab: int, seed: int = 0, length: int = 32) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (length,), generator=gen).tolist()


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


# Long-context RoPE: the pre-training context is 64 positions, the prompt 300 (positions
# 64..299 are where yarn's interpolated frequencies and llama3's bands matter).
LONG_PROMPT = 300
_YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 8.0,
         "original_max_position_embeddings": 64}  # fmt: skip
_LLAMA3 = {"rope_type": "llama3", "rope_theta": 50000.0, "factor": 8.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 64}  # fmt: skip
# the legacy layout (`rope_scaling` with `type`, top-level rope_theta) and yarn's options
_YARN_LEGACY = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                "beta_fast": 16.0, "beta_slow": 2.0, "truncate": False}  # fmt: skip
LONG_CASES = {
    "qwen3-yarn": ("qwen3", dict(rope_parameters=_YARN, max_position_embeddings=512)),
    # Qwen's recipe: yarn added to a config that keeps max_position_embeddings (256 < 300);
    # the context is original * factor = 512
    "qwen3-yarn-recipe": ("qwen3", dict(rope_parameters=_YARN, max_position_embeddings=256)),
    "qwen2-yarn-legacy": ("qwen2", dict(max_position_embeddings=512)),
    "llama-llama3": ("llama", dict(rope_parameters=_LLAMA3, max_position_embeddings=512)),
}


def _legacy_rope(folder: Path, rope_scaling: dict) -> None:
    """Rewrite config.json's RoPE in the legacy layout: `rope_scaling` + top-level theta."""
    path = folder / "config.json"
    config = json.loads(path.read_text())
    config.pop("rope_parameters", None)
    config.update(rope_scaling=rope_scaling, rope_theta=10000.0)
    path.write_text(json.dumps(config))


@pytest.fixture(scope="module", params=sorted(LONG_CASES))
def long_context_dir(request, tmp_path_factory) -> Path:
    from tiny_models import make_tiny_checkpoint

    arch, overrides = LONG_CASES[request.param]
    folder = make_tiny_checkpoint(tmp_path_factory.mktemp(request.param), arch, **overrides)
    if request.param.endswith("-legacy"):
        _legacy_rope(folder, _YARN_LEGACY)
    return folder


@pytest.mark.parametrize("plan", ["invariant", "fast"])
def test_long_context_rope_agrees_with_transformers(long_context_dir, plan):
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(long_context_dir, dtype=torch.float32).eval()
    loaded = load_model(long_context_dir)
    assert loaded.config.rope_scaling is not None
    dep = build_deployment(loaded, plan)
    assert dep.max_model_len == 512  # yarn's recipe case: beyond max_position_embeddings
    _assert_agrees(dep, hf, _prompt(dep.config.vocab_size, seed=1, length=LONG_PROMPT))
