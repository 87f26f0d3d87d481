"""The engine determinism matrix on CPU: batching, chunking, prefill vs decode, prefix reuse,
cache pressure, staggered arrivals and aborts, seeded sampling — every case ends in the spec's
predicate against Ref (bitwise), and the fast plan is the negative control. Mixtures of
experts too: tiny qwen3_moe (all layers sparse; and with dense layers), mixtral, and a
qwen3_moe whose router sends every token to one expert and none to others."""

from __future__ import annotations

import pytest

from moe_routing import bias_router, check_biased_routing, record_expert_counts
from samebits.deployment import build_deployment
from samebits.engine.scheduler import Scheduler
from samebits.model import load_model
from samebits.testing.determinism_matrix import (
    MatrixSize,
    build_scenarios,
    check_matrix,
    full_check,
    full_check_problems,
)


def _deployment(path_or_model, plan: str = "invariant"):
    loaded = load_model(path_or_model) if not hasattr(path_or_model, "weights") else path_or_model
    return build_deployment(loaded, plan)


def _full_check(dep, size: MatrixSize, label: str, matrix_log) -> int:
    report, hits = full_check(dep, size)
    matrix_log(f"{label}: {report.summary()}")
    assert full_check_problems(report, hits) == []
    return report.total_rows


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_matrix_tiny_models(request, arch, matrix_log):
    dep = _deployment(request.getfixturevalue(f"tiny_{arch}_dir"))
    repeats = 2 if arch == "llama" else 1
    _full_check(
        dep, MatrixSize(vocab=dep.config.vocab_size, repeats=repeats), f"tiny-{arch}", matrix_log
    )


def test_matrix_async_scheduling(tiny_qwen3_dir, matrix_log, monkeypatch):
    """Every engine launches step n+1 before building step n's outputs (the GPU default),
    and a plain-greedy step's successor before its tokens are known (lookahead): arrivals
    and aborts between steps land one step later, preemptions and prefix hits happen at
    other steps, and every row is still Ref's."""
    ahead = []
    schedule_ahead = Scheduler.schedule_ahead
    monkeypatch.setattr(
        Scheduler,
        "schedule_ahead",
        lambda s, prev: ahead.append(schedule_ahead(s, prev)) or ahead[-1],
    )
    dep = _deployment(tiny_qwen3_dir)
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=1, async_scheduling=True)
    _full_check(dep, size, "tiny-qwen3, async scheduling", matrix_log)
    assert sum(out is not None for out in ahead) >= 50  # steps scheduled ahead (92 when written)


@pytest.mark.slow
def test_matrix_smollm2(smollm2_model, matrix_log):
    dep = _deployment(smollm2_model)
    size = MatrixSize(vocab=dep.config.vocab_size, n_out=8, batch_sizes=(2, 6, 12, 32), repeats=1)
    rows = _full_check(dep, size, "SmolLM2-135M", matrix_log)
    assert rows >= 784


def test_negative_control_fast_plan_fails(tiny_llama_dir, matrix_log):
    dep = _deployment(tiny_llama_dir, "fast")
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=1)
    report = check_matrix(dep, [s for s in build_scenarios(size) if s.category == "batch"])
    matrix_log(f"negative control (fast plan, batch category): {report.summary()}")
    assert report.mismatches, "the fast plan was expected to break batch invariance"


def _long_report(plan: str):
    """The long-context scenarios (prompts of 700 and 1400 tokens: 2 and 3 attention spans of
    512) on tiny-qwen3 under `plan`."""
    from samebits.model.random_init import random_model
    from samebits.testing.determinism_matrix import LONG

    dep = _deployment(random_model("tiny-qwen3", seed=3), plan)
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=1, long_prompts=(700, 1400))
    return check_matrix(dep, [s for s in build_scenarios(size) if s.category == LONG])


def test_matrix_long_contexts(matrix_log):
    """Chunk budgets around a span, batches, a prefix hit ending mid-span, preemption of long
    requests."""
    from samebits.testing.determinism_matrix import LONG

    report = _long_report("invariant")
    matrix_log(f"tiny-qwen3, long contexts: {report.summary()}")
    assert report.mismatches == []
    assert report.rows[LONG] >= 40 and report.preemptions > 0 and report.prefix_hits >= 1280


def test_negative_control_fast_plan_long_contexts(matrix_log):
    report = _long_report("fast")
    matrix_log(f"negative control (fast plan, long contexts): {report.summary()}")
    assert report.mismatches, "the fast plan was expected to break invariance at long contexts"


MOE_ARCHS = ["qwen3_moe", "qwen3_moe_mixed", "mixtral"]


@pytest.mark.parametrize("arch", MOE_ARCHS)
def test_matrix_tiny_moe_models(request, arch, matrix_log):
    dep = _deployment(request.getfixturevalue(f"tiny_{arch}_dir"))
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=2)
    assert _full_check(dep, size, f"tiny-{arch}", matrix_log) >= 784


def test_matrix_moe_one_expert_takes_every_token(tiny_qwen3_moe_dir, matrix_log):
    """Batches in which one expert gets every token of the batch and two experts get none
    (checked on the routing itself: `moe_routing.bias_router`), and every row is still Ref's."""
    dep = _deployment(bias_router(load_model(tiny_qwen3_moe_dir)))
    counts = record_expert_counts(dep)
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=1)
    _full_check(dep, size, "tiny-qwen3_moe, one expert takes every token", matrix_log)
    assert check_biased_routing(counts, dep.config.moe.num_experts_per_tok) >= 64


def test_negative_control_fast_plan_fails_moe(tiny_qwen3_moe_dir, matrix_log):
    dep = _deployment(tiny_qwen3_moe_dir, "fast")
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=1)
    report = check_matrix(dep, [s for s in build_scenarios(size) if s.category == "batch"])
    matrix_log(f"negative control (fast plan, tiny-qwen3_moe, batch category): {report.summary()}")
    assert report.mismatches, "the fast plan was expected to break batch invariance"
