"""CUDA graphs for decode steps on a real GPU (issue 13): the same requests through an engine
whose decode steps replay per-bucket graphs (padding rows included) and through an eager
engine give every logits row the same bits (integer views), and the real KV-cache slots the
same bits; padding only ever touched the sink block. Batch sizes 1, 3, 64, 100 (buckets 1, 4,
64, 128: no padding, 1 padding row, none, 28 padding rows), for the tiny checkpoints of every
architecture and a random-weight Llama-3-8B-shaped model. The fast plan's graphs are only
smoke-tested (it is not batch-invariant, so padding changes its bits)."""

from __future__ import annotations

import numpy as np
import pytest

from samebits import SamplingParams
from samebits.deployment import build_deployment
from samebits.engine.engine import LLMEngine
from samebits.model import load_model, weights_target

pytestmark = pytest.mark.gpu
BATCHES = (1, 3, 64, 100)
MAX_NUM_SEQS = 128  # buckets 1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128
NUM_KV_BLOCKS = 1200
NEW_TOKENS = 6  # the first comes from the (eager) prompt step, 5 from decode graphs


def _loaded(request, name: str):
    import torch

    if name.startswith("tiny_"):
        return load_model(request.getfixturevalue(f"{name}_dir"), True,
                          weights_target("cuda", "bfloat16"))  # fmt: skip
    from samebits.model.random_init import random_model

    return random_model(name, seed=0, device="cuda", dtype=torch.bfloat16)


def _engine(dep, enforce_eager: bool) -> LLMEngine:
    return LLMEngine.from_deployment(
        dep, max_num_seqs=MAX_NUM_SEQS, max_num_batched_tokens=16384,
        num_kv_blocks=NUM_KV_BLOCKS, enforce_eager=enforce_eager,
    )  # fmt: skip


def _run(engine: LLMEngine, n: int, tag: str) -> dict:
    """n requests at once (prompts 9..149 tokens, so decode positions cross key tiles and
    pages), greedy-free seeded sampling; every output's float32 rows."""
    rng = np.random.default_rng(n)
    for i in range(n):
        prompt = rng.integers(3, engine.vocab_size - 3, 9 + (37 * i) % 141).tolist()
        params = SamplingParams(max_tokens=NEW_TOKENS, temperature=0.7, seed=i,
                                ignore_eos=True, return_logits=True)  # fmt: skip
        engine.add_request(f"{tag}-{i}", prompt, params)
    outs = {}
    while engine.has_unfinished_requests():
        outs.update({o.request_id: o.outputs[0] for o in engine.step() if o.finished})
    return outs


def _compare(graphed: dict, eager: dict) -> int:
    """Rows compared; raises on the first mismatch."""
    rows = 0
    for rid, want in eager.items():
        got = graphed[rid]
        assert got.token_ids == want.token_ids, rid
        assert got.logits_digests == want.logits_digests, rid
        a, b = got.logits.view(np.uint32), want.logits.view(np.uint32)
        bad = np.nonzero((a != b).any(axis=1))[0].tolist()
        assert not bad, f"{rid}: rows {bad} differ between graph replay and eager"
        rows += len(a)
    return rows


def _same_kv(graphed: LLMEngine, eager: LLMEngine) -> None:
    import torch

    block = graphed.config.cache_config.block_size
    real = NUM_KV_BLOCKS * block
    g, e = graphed.runner.kv_cache, eager.runner.kv_cache
    for a, b in zip(g.k + g.v, e.k + e.v, strict=True):
        assert a.shape[0] == real + block  # the sink block
        assert torch.equal(a[:real].view(torch.int16), b.view(torch.int16))


@pytest.mark.parametrize(
    "name", ["tiny_llama", "tiny_qwen2", "tiny_qwen3", "tiny_mistral", "llama-3-8b"]
)
def test_graph_replay_equals_eager_every_row(request, cuda, name, gpu_record):
    dep = build_deployment(_loaded(request, name), "invariant", release_sources=True,
                           device="cuda")  # fmt: skip
    graphed, eager = _engine(dep, False), _engine(dep, True)
    assert graphed.runner.graphs is not None and eager.runner.graphs is None
    rows = 0
    for n in BATCHES:
        before = graphed.runner.stats()["graph_steps"]
        rows += _compare(_run(graphed, n, f"b{n}"), _run(eager, n, f"b{n}"))
        assert graphed.runner.stats()["graph_steps"] - before == NEW_TOKENS - 1
        _same_kv(graphed, eager)
    stats = graphed.runner.stats()
    gpu_record(f"cuda graphs {name}", f"{rows} logits rows at batch {BATCHES}, graph == eager "
               f"bitwise; {stats}")  # fmt: skip


def test_fast_plan_graphs_run(request, cuda, gpu_record):
    """Smoke: the fast plan's decode graphs (cuBLAS + the paged Triton attention) replay and
    stay close to its eager steps (not bitwise: cuBLAS picks kernels by M)."""
    dep = build_deployment(_loaded(request, "tiny_qwen3"), "fast", device="cuda")
    graphed, eager = _engine(dep, False), _engine(dep, True)
    got, want = _run(graphed, 3, "f"), _run(eager, 3, "f")
    assert graphed.runner.stats()["graph_steps"] == NEW_TOKENS - 1
    # row 1: the first graphed row, after the same history (later tokens may differ)
    worst = max(float(np.abs(got[r].logits[1] - want[r].logits[1]).max()) for r in want)
    gpu_record("cuda graphs fast plan tiny_qwen3", f"max |graph - eager| logit {worst:.3g}")
    assert np.isfinite(worst) and worst < 0.5
