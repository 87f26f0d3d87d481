"""Deploying published shapes nobody shipped per-shape certificates for (issue 28): the
random-weight Qwen3-4B shape (2 layers: the units do not depend on the depth; tied
embeddings) and Qwen3-4B with its vocabulary padded to 151,936 + 1,000 deploy *certified* through
the class certificates (`units.symbolic_unit`), with no proving, and generate: batched ==
each prompt alone (the engine's batch invariance at these shapes)."""

from __future__ import annotations

import dataclasses

import pytest

from samebits.analysis.published_shapes import PUBLISHED

pytestmark = pytest.mark.gpu

CASES = {"qwen3-4b": 0, "qwen3-4b-padded-vocab": 1000}


def _config(case: str):
    from samebits.model.config import model_config_from_hf

    raw = PUBLISHED[case.removesuffix("-padded-vocab")]
    cfg = model_config_from_hf(raw)
    return dataclasses.replace(cfg, vocab_size=cfg.vocab_size + CASES[case])


@pytest.mark.parametrize("case", sorted(CASES))
def test_gpu_published_shape_deploys_certified(cuda, case, gpu_record):
    import torch

    from samebits import LLM, SamplingParams
    from samebits.deployment import build_deployment
    from samebits.engine.engine import LLMEngine
    from samebits.kernels.triton.certified import gate
    from samebits.kernels.triton.certified import units as U
    from samebits.model.random_init import random_model

    loaded = random_model(_config(case), seed=0, device="cuda", dtype=torch.bfloat16,
                          num_layers=2)  # fmt: skip
    dep = build_deployment(loaded, "invariant", device="cuda")  # raises when not certified
    comp = dep.components["certificates"]
    assert comp["status"] == "certified", comp
    units = U.units_for(U.dims_of(loaded.config))
    by_class = [u["key"] for u in units if not (gate.SHIPPED_DIR / f"{u['key']}.json").exists()]
    assert by_class, "expected units covered only by their class certificate"
    # RoPE and the q/k norm at these head counts: head classes (HEADS symbolic)
    assert {"rows.rope.h32.d128", "rows.head_rms_norm.h8.d128"} <= set(by_class), by_class
    llm = LLM(engine=LLMEngine.from_deployment(dep, max_num_seqs=4, num_kv_blocks=128))
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True, seed=0)
    prompts = ["The capital of France is", "def fibonacci(n):", "one two three " * 5]
    batched = [o.outputs[0].token_ids for o in llm.generate(prompts, params)]
    alone = [llm.generate([p], params)[0].outputs[0].token_ids for p in prompts]
    assert batched == alone and all(len(t) == 6 for t in batched)
    gpu_record(f"certified by class certificates: {case}",
               f"{len(comp['units'])} units certified (digest {comp['digest'][:12]}); "
               f"batched == alone; {len(by_class)} covered by class certificates")  # fmt: skip
