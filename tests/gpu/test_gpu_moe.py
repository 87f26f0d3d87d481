"""Mixtures of experts on the GPU invariant plan (Triton, bfloat16), marker `gpu`.

- The grouped expert kernel (`kernels/triton/moe_grouped.py`) at the Qwen3-30B-A3B expert
  shapes (128 experts, top 8, hidden 2048, expert width 768), bf16: every (token, rank) row
  bitwise equal to the per-expert path (`kernels.moe.expert_outputs`: each expert's own
  split-plan linears at the launch its row count picks, TMA included) for skewed routings
  (every token on one expert, empty experts, one token), eagerly and replayed from a CUDA
  graph captured once and fed other routings; the one-launch tile table equal to the torch
  ops' table; the combine kernel bitwise equal to `kernels.moe.combine`.
- The determinism matrix on the tiny qwen3_moe / qwen3_moe_mixed / mixtral checkpoints
  (certified, like the 30B-A3B shape: their units are in the shipped set), with decode steps
  replayed from CUDA graphs (the grouped expert launch, which needs no host sync) against Ref
  (eager), and on the biased router that sends every token to one expert.
- The Qwen3-30B-A3B shape: the full 48-layer random-weight model loads on one H200 and
  generates, batched == alone == eager (tokens and logits digests); a 4-layer prefix of it
  (the same layer shapes, 128 experts, top 8) runs the matrix at >= 784 rows, and the stock
  torch CUDA plan on it is the negative control.
"""

from __future__ import annotations

import dataclasses

import pytest

from moe_routing import bias_router, check_biased_routing, record_expert_counts
from samebits.deployment import build_deployment
from samebits.model import load_model
from samebits.testing.determinism_matrix import (
    MatrixSize,
    build_scenarios,
    check_matrix,
    full_check,
    full_check_problems,
)

pytestmark = pytest.mark.gpu
PAGE = 16  # the smallest KV page the attention certificates cover
BIG = MatrixSize(vocab=0, n_out=8, batch_sizes=(2, 7, 16, 64), repeats=1, small_block=PAGE)
PRESET = "qwen3-30b-a3b"


def _deployment(loaded, plan: str = "invariant", release: bool = True):
    return build_deployment(loaded, plan, release_sources=release, device="cuda")


def _check(dep, size: MatrixSize, label: str, gpu_record) -> int:
    report, hits = full_check(dep, size)
    gpu_record(f"matrix {label}", report.summary())
    assert full_check_problems(report, hits) == []
    assert report.total_rows >= 784
    return report.total_rows


@pytest.mark.parametrize("arch", ["qwen3_moe", "qwen3_moe_mixed", "mixtral"])
def test_gpu_matrix_tiny_moe(request, cuda, arch, gpu_record):
    dep = _deployment(load_model(request.getfixturevalue(f"tiny_{arch}_dir")))
    assert dep.components["certificates"]["status"] == "certified"
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=2, small_block=PAGE)
    _check(dep, size, f"tiny-{arch}", gpu_record)


def test_gpu_matrix_moe_one_expert_takes_every_token(cuda, tiny_qwen3_moe_dir, gpu_record):
    dep = _deployment(bias_router(load_model(tiny_qwen3_moe_dir)))
    counts = record_expert_counts(dep)  # eager forwards (engine and Ref); graphs replay
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=2, small_block=PAGE)
    _check(dep, size, "tiny-qwen3_moe, one expert takes every token", gpu_record)
    most = check_biased_routing(counts, dep.config.moe.num_experts_per_tok)
    gpu_record("biased router", f"{len(counts)} routing calls, up to {most} tokens on expert 5")
    assert most >= 64


# ------------------------------------------------------------- the Qwen3-30B-A3B shape
def _random(num_layers: int | None = None):
    import torch

    from samebits.model.random_init import random_model

    return random_model(PRESET, seed=0, device="cuda", dtype=torch.bfloat16, num_layers=num_layers)


def _generate(llm, prompts, params) -> list[tuple]:
    """(token ids, logits digests) of each prompt's output."""
    outs = llm.generate(prompts, params)
    return [(o.outputs[0].token_ids, o.outputs[0].logits_digests) for o in outs]


def test_gpu_qwen3_30b_a3b_generate(cuda, gpu_record):
    """The full random-weight model (48 sparse layers of 128 experts; ~61 GB in bf16) on one
    GPU: a short greedy generation, batched == each prompt alone == eager (no CUDA graphs),
    tokens and logits digests; the tokens spread over most experts."""
    import time

    import torch

    from samebits import LLM, SamplingParams
    from samebits.engine.engine import LLMEngine

    start = time.perf_counter()
    dep = _deployment(_random())
    built = time.perf_counter() - start
    counts = record_expert_counts(dep)
    params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, seed=0)
    prompts = ["The capital of France is", "def fibonacci(n):", "Mixture of experts " * 4]
    kw = dict(max_num_seqs=4, num_kv_blocks=256)
    llm = LLM(engine=LLMEngine.from_deployment(dep, **kw))
    start = time.perf_counter()
    batched = _generate(llm, prompts, params)
    seconds = time.perf_counter() - start
    alone = [_generate(llm, [p], params)[0] for p in prompts]
    eager = _generate(LLM(engine=LLMEngine.from_deployment(dep, enforce_eager=True, **kw)),
                      prompts, params)  # fmt: skip
    assert batched == alone == eager
    assert all(len(tokens) == 8 for tokens, _ in batched)
    used = int((torch.stack(counts).sum(dim=0) > 0).sum())
    memory = torch.cuda.max_memory_allocated() / 2**30
    assert dep.components["certificates"]["status"] == "certified"
    gpu_record(f"random {PRESET} bf16 generate",
               f"built in {built:.0f} s, peak {memory:.0f} GiB; 3 x 8 tokens "
               f"batched in {seconds:.1f} s; batched == alone == eager; {used} of 128 experts "
               "used")  # fmt: skip
    assert used >= 64


@pytest.fixture(scope="module")
def prefix_model(cuda):
    """The first 4 layers of the random 30B-A3B model (its layer shapes; `random_model`'s
    `num_layers` gives a prefix of the full model), shared by both plans."""
    return _random(num_layers=4)


def test_gpu_matrix_qwen3_30b_a3b_shaped(prefix_model, gpu_record):
    dep = _deployment(prefix_model, release=False)
    assert dep.components["certificates"]["status"] == "certified"
    size = dataclasses.replace(BIG, vocab=dep.config.vocab_size)
    _check(dep, size, f"random {PRESET} (4 layers) bf16", gpu_record)


def test_gpu_negative_control_fast_plan_moe(prefix_model, gpu_record):
    dep = _deployment(prefix_model, "fast", release=False)
    size = dataclasses.replace(BIG, vocab=dep.config.vocab_size)
    report = check_matrix(dep, [s for s in build_scenarios(size) if s.category == "batch"])
    gpu_record(f"negative control (cuda fast plan, {PRESET} 4 layers, batch category)",
               report.summary())  # fmt: skip
    assert report.mismatches, "the stock-torch CUDA plan was expected to break batch invariance"


# ------------------------------------------------- the grouped expert kernel, 30B-A3B shapes
E30, TOP_K30, H30, I30 = 128, 8, 2048, 768


@pytest.fixture(scope="module")
def experts_30b(cuda):
    """128 random experts of the Qwen3-30B-A3B shape on the GPU plan's linears, grouped (the
    per-expert linears then read views of the stacked weights: the same weights)."""
    import torch

    from samebits.kernels.plan import build_plan
    from samebits.kernels.triton.backend import TritonOps

    ops = TritonOps(build_plan("invariant", device="cuda", moe=True))
    gen = torch.Generator(device="cuda").manual_seed(0)

    def w(n, k):
        return torch.randn((n, k), generator=gen, device="cuda") / k**0.5

    experts = [(ops.linear(w(2 * I30, H30), None, role="gate_up"),
                ops.linear(w(H30, I30), None, role="down")) for _ in range(E30)]  # fmt: skip
    return ops, ops.moe_group(experts)


def _routing_30b(kind: str, n: int):
    import torch

    gen = torch.Generator(device="cuda").manual_seed(n)
    if kind == "one_expert":  # every token on experts 7..14, expert 7 at rank 0
        return torch.arange(7, 7 + TOP_K30, device="cuda").expand(n, TOP_K30).contiguous()
    if kind == "skewed":  # experts >= 16 get nothing; expert 3 takes every token
        rest = torch.stack([torch.randperm(15, generator=gen, device="cuda")[: TOP_K30 - 1]
                            for _ in range(n)])  # fmt: skip
        return torch.cat([torch.full((n, 1), 3, device="cuda"), rest + (rest >= 3)], 1)
    logits = torch.randn((n, E30), generator=gen, device="cuda")
    return torch.topk(logits, TOP_K30, dim=1).indices


def _bits(t):
    import torch

    return t.contiguous().view(torch.int16 if t.dtype == torch.bfloat16 else torch.int32)


CASES_30B = [("one_expert", 1), ("one_expert", 64), ("one_expert", 300), ("skewed", 16),
             ("skewed", 129), ("random", 1), ("random", 16), ("random", 64), ("random", 600)]  # fmt: skip


@pytest.mark.parametrize("kind, n", CASES_30B)
def test_gpu_grouped_experts_equal_the_per_expert_path(experts_30b, kind, n, gpu_record):
    import torch

    from samebits.kernels.moe import combine as torch_combine
    from samebits.kernels.moe import expert_outputs
    from samebits.kernels.triton.moe_grouped import combine as grouped_combine
    from samebits.kernels.triton.moe_grouped import grouped_outputs, tile_table, tile_table_torch

    ops, grouped = experts_30b
    x = torch.randn((n, H30), device="cuda").to(torch.bfloat16)
    ids = _routing_30b(kind, n)
    ref = expert_outputs(x, ids, list(grouped), ops.silu_mul)
    got = grouped_outputs(x, ids, grouped, ops.silu_mul)
    bad = (_bits(got) != _bits(ref)).reshape(n * TOP_K30, -1).any(dim=1)
    assert int(bad.sum()) == 0, f"{int(bad.sum())} of {n * TOP_K30} rows differ"
    # the one-launch tile table (decode-sized routings) against the torch ops' table
    for bm in (16, 64):
        a, b = tile_table(ids, E30, bm), tile_table_torch(ids, E30, bm)
        assert all(torch.equal(getattr(a, f), getattr(b, f))
                   for f in ("order", "tokens", "expert", "lo", "hi"))  # fmt: skip
    # the combine kernel (no FMA contraction) against the torch ops of kernels.moe.combine
    weights = torch.rand((n, TOP_K30), device="cuda")
    fused = grouped_combine(got, weights, torch.bfloat16)
    assert bool((_bits(fused) == _bits(torch_combine(got, weights, torch.bfloat16))).all())
    gpu_record(f"grouped experts {kind} n={n}", f"{n * TOP_K30} rows bitwise equal, combine too")


def test_gpu_grouped_experts_replay_from_a_cuda_graph(experts_30b, gpu_record):
    """One capture at 64 tokens, replayed with routings the capture never saw (every token on
    one expert, empty experts, random): each replay bitwise equal to the eager per-expert
    path; the capture itself needs no host sync (it would raise)."""
    import torch

    from samebits.kernels.moe import expert_outputs
    from samebits.kernels.triton.moe_grouped import grouped_outputs

    ops, grouped = experts_30b
    n = 64
    x = torch.randn((n, H30), device="cuda").to(torch.bfloat16)
    ids = _routing_30b("random", n).clone()
    grouped_outputs(x, ids, grouped, ops.silu_mul)  # compile outside the capture
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        out = grouped_outputs(x, ids, grouped, ops.silu_mul)
    for kind in ("one_expert", "skewed", "random"):
        ids.copy_(_routing_30b(kind, n))
        x.copy_(torch.randn((n, H30), device="cuda").to(torch.bfloat16))
        graph.replay()
        ref = expert_outputs(x, ids, list(grouped), ops.silu_mul)
        assert bool((_bits(out) == _bits(ref)).all()), kind
    gpu_record("grouped experts in a CUDA graph", "3 routings replayed, bitwise equal to eager")


@pytest.mark.parametrize("experts, top_k", [(128, 8), (8, 2), (60, 4)])
def test_gpu_router_kernel_equals_the_torch_route(cuda, experts, top_k, gpu_record):
    """The one-launch router (`kernels/triton/moe_router.py`) against `kernels.moe.route`'s
    torch ops on the GPU and on the CPU: ids equal, weights equal as int32 views, for decode-
    and prefill-sized batches with ties, -inf, floor and huge-spread rows."""
    import torch

    from moe_routing import router_logits
    from samebits.kernels.moe import route
    from samebits.kernels.triton import moe_router

    for n, normalize in ((1, True), (64, True), (4099, False)):
        logits = router_logits(n, experts, seed=n + experts, device="cuda")
        ids, w = moe_router.route(logits, top_k, normalize)
        for ref_ids, ref_w in (route(logits, top_k, normalize),
                               route(logits.cpu(), top_k, normalize)):  # fmt: skip
            assert torch.equal(ids.cpu(), ref_ids.cpu())
            assert torch.equal(_bits(w).cpu(), _bits(ref_w).cpu())
    gpu_record(
        f"router kernel E={experts} k={top_k}", "ids and weight bits equal to torch (GPU, CPU)"
    )
