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


def test_uncertified_fused_launches_run_op_by_op_with_the_same_bits(
    cuda, gpu_record, tmp_path, monkeypatch
):
    """A certificate set without the model's fused units (linear + add + RMSNorm, qkv split +
    RoPE + K/V store): the deployment runs their op-by-op path, still certified, and every
    token and logits digest equals the fused deployment's."""
    import shutil

    from samebits.analysis.certify_cli import units_of
    from samebits.kernels.triton.certified import gate
    from samebits.kernels.triton.certified import units as U

    model = "random:tiny-llama"  # its o and down split K: fused sum + add + RMSNorm; fused qkv
    units = units_of([model])
    fused = [u for u in units if U.op_by_op_units(u) is not None]
    drop = {u["key"] for u in fused} | {(U.symbolic_unit(u) or u)["key"] for u in fused}
    certs = tmp_path / "certs"
    shutil.copytree(gate.SHIPPED_DIR, certs, ignore=lambda d, names: [
        n for n in names if n.removesuffix(".json") in drop])  # fmt: skip
    params = SamplingParams(max_tokens=8, temperature=0.8, seed=5, ignore_eos=True)
    prompts = [f"prompt {i} " * (1 + i % 4) for i in range(12)]
    runs = {}
    for name, directory in (("fused", gate.SHIPPED_DIR), ("op_by_op", certs)):
        monkeypatch.setenv(gate.ENV_DIR, str(directory))
        llm = LLM(model, device="cuda", gpu_memory_utilization=0.3)
        comp = llm.engine.deployment.components["certificates"]
        assert comp["status"] == "certified"
        runs[name] = (comp.get("op_by_op", []), llm.generate(prompts, params))
        llm.close()
    assert runs["fused"][0] == [] and runs["op_by_op"][0] == sorted(u["key"] for u in fused)
    for a, b in zip(runs["fused"][1], runs["op_by_op"][1], strict=True):
        assert a.outputs[0].token_ids == b.outputs[0].token_ids
        assert a.outputs[0].logits_digests == b.outputs[0].logits_digests
    assert len(runs["op_by_op"][0]) == 3
    gpu_record("fused units op by op (tiny llama)", f"{runs['op_by_op'][0]}: {len(prompts)} "
               "requests, tokens and digests equal to the fused deployment's")  # fmt: skip
