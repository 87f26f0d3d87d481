"""The user-facing path on the GPU: `LLM(path, device="cuda")` loads a HF folder straight to
bfloat16 on the device, takes the GPU's scheduler budgets (256 / 8192), sizes the KV cache
from free memory (capped by max_num_seqs), and every batched output equals the same request
alone (tokens and logits digests)."""

from __future__ import annotations

import pytest

from samebits import LLM, SamplingParams
from samebits.config import SCHEDULER_DEFAULTS
from samebits.engine.assembly import KV_BLOCKS_PER_SEQUENCE_SLOT

pytestmark = pytest.mark.gpu


def test_llm_on_cuda_batched_equals_alone(cuda, tiny_qwen3_dir, gpu_record):
    import torch

    llm = LLM(str(tiny_qwen3_dir), device="cuda", gpu_memory_utilization=0.5)
    weights = llm.engine.deployment.model.layers[0].qkv.weight
    assert weights.device.type == "cuda" and weights.dtype == torch.bfloat16
    blocks = llm.engine.scheduler.num_kv_blocks
    params = SamplingParams(max_tokens=8, temperature=0.8, seed=3, ignore_eos=True)
    prompts = [f"prompt {i} " * (1 + i % 5) for i in range(24)]
    batched = llm.generate(prompts, params)
    alone = [llm.generate([p], params)[0] for p in prompts[::5]]
    for one, many in zip(alone, batched[::5], strict=True):
        assert one.outputs[0].token_ids == many.outputs[0].token_ids
        assert one.outputs[0].logits_digests == many.outputs[0].logits_digests
    gpu_record("LLM(device='cuda') tiny qwen3", f"{blocks} KV blocks at 0.5 utilization; "
               f"{len(alone)} requests alone == batched (tokens, digests)")  # fmt: skip
    seqs = llm.engine.config.max_num_seqs
    assert (seqs, llm.engine.config.max_num_batched_tokens) == SCHEDULER_DEFAULTS["cuda"]
    useful = KV_BLOCKS_PER_SEQUENCE_SLOT * seqs * -(-llm.engine.max_model_len // 16)
    assert 512 < blocks <= useful
