"""Decode graphs over the GPU invariant plan's op set (`TritonOps`, Triton's interpreter on the
CPU, with the graph runner's CPU stand-in): a padded bucket's static program map and block
table give every real row the bits of the eager forward, which plans attention from the host
arrays (integer views). Kept small: the interpreter is slow."""

from __future__ import annotations

import numpy as np
import torch
from test_triton_engine import triton_deployment  # noqa: F401 - the module fixture

from samebits.engine.runner import ModelRunner
from samebits.engine.scheduler import ScheduledRequest, SchedulerOutput
from samebits.graphs.policy import GraphConfig

BLOCKS, BLOCK = 12, 16


def _step(reqs: list[tuple[str, tuple[int, ...], int, tuple[int, ...]]]) -> SchedulerOutput:
    scheduled = tuple(ScheduledRequest(r, ids, start, table, True) for r, ids, start, table in reqs)
    return SchedulerOutput(scheduled, (), sum(len(s.token_ids) for s in scheduled))


def test_triton_decode_graph_rows_equal_eager(triton_deployment):  # noqa: F811
    dep = triton_deployment
    eager = ModelRunner(dep.model, BLOCK, BLOCKS)
    config = GraphConfig(True, (1, 4), capture_at_start=False)
    graphed = ModelRunner(dep.model, BLOCK, BLOCKS, config, dep.max_model_len)
    prompts = {"a": (5, 9, 30, 7, 2, 11), "b": tuple(range(3, 21)), "c": (40, 41)}
    tables = {"a": (4,), "b": (0, 7), "c": (9, 2)}  # scattered pages
    prefill = _step([(r, p, 0, tables[r][: -(-len(p) // BLOCK)]) for r, p in prompts.items()])
    for runner in (eager, graphed):
        runner.execute(prefill)  # a prompt step: the graph runner runs it eagerly
    decode = _step([(r, (50 + i,), len(p), tables[r]) for i, (r, p) in enumerate(prompts.items())])
    want, got = eager.execute(decode), graphed.execute(decode)
    assert graphed.stats() == {"graph_steps": 1, "eager_steps": 1, "graphs_captured": 1}
    for rid in prompts:
        assert np.array_equal(want[rid].view(np.uint32), got[rid].view(np.uint32)), rid
    real = BLOCKS * BLOCK
    for a, b in zip(eager.kv_cache.k, graphed.kv_cache.k, strict=True):
        assert torch.equal(a.view(torch.int32), b[:real].view(torch.int32))


def test_triton_long_decode_graph_splits_kv_same_bits(triton_deployment, monkeypatch):  # noqa: F811
    """With spans of 64 keys, a decode step past the first span replays the graph whose
    attention splits the KV (captured on first use): the rows of the eager step."""
    import dataclasses

    dep = triton_deployment
    monkeypatch.setattr(dep.model, "plan", dataclasses.replace(dep.model.plan, attention_span=64))
    monkeypatch.setattr(dep.model.ops, "span", 64)
    eager = ModelRunner(dep.model, BLOCK, BLOCKS)
    config = GraphConfig(True, (1, 4), capture_at_start=False)
    graphed = ModelRunner(dep.model, BLOCK, BLOCKS, config, dep.max_model_len)
    prompts = {"a": tuple(range(3, 73)), "b": tuple(range(100, 200))}
    tables = {"a": (4, 0, 7, 1, 9), "b": (2, 11, 3, 10, 5, 8, 6)}
    prefill = _step([(r, p, 0, tables[r]) for r, p in prompts.items()])
    for runner in (eager, graphed):
        runner.execute(prefill)
    decode = _step([(r, (50 + i,), len(p), tables[r]) for i, (r, p) in enumerate(prompts.items())])
    want, got = eager.execute(decode), graphed.execute(decode)
    assert list(graphed.graphs.graphs) == [(4, True)]
    for rid in prompts:
        assert np.array_equal(want[rid].view(np.uint32), got[rid].view(np.uint32)), rid
