"""Decode graphs on the CPU (the `EagerStepGraph` stand-in runs the captured forward on the
static buffers at each replay) with the CPU invariant plan: padded-bucket execution gives every
real row the eager bits (integer views), padding K/V lands only in the sink block, buckets and
fallbacks follow the policy, and every sampled token still gets its digest."""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch

from samebits import SamplingParams
from samebits.deployment import build_deployment
from samebits.engine.engine import LLMEngine
from samebits.engine.runner import ModelRunner
from samebits.engine.scheduler import ScheduledRequest, SchedulerOutput
from samebits.graphs.decode_buffers import DecodeBuffers
from samebits.graphs.policy import NOT_DECODE, TOO_LARGE, GraphConfig
from samebits.model import load_model
from samebits.outputs import logits_digest

BLOCKS, BLOCK = 48, 16


@pytest.fixture(scope="module")
def deployment(tiny_llama_dir):
    return build_deployment(load_model(tiny_llama_dir), "invariant")


def _engine(dep, buckets: tuple[int, ...] | None, max_num_seqs: int = 8) -> LLMEngine:
    engine = LLMEngine.from_deployment(dep, max_num_seqs=max_num_seqs, num_kv_blocks=BLOCKS)
    if buckets is not None:
        config = GraphConfig(True, buckets, capture_at_start=False)
        engine.runner = ModelRunner(dep.model, BLOCK, BLOCKS, config, dep.max_model_len)
    return engine


def _generate(engine: LLMEngine, n: int, max_tokens: int = 5) -> dict:
    rng = np.random.default_rng(1)
    for i in range(n):
        prompt = rng.integers(3, engine.vocab_size, 5 + 9 * i).tolist()
        params = SamplingParams(max_tokens=max_tokens, temperature=0.8, seed=i,
                                return_logits=True, ignore_eos=True)  # fmt: skip
        engine.add_request(f"r{i}", prompt, params)
    done = {}
    while engine.has_unfinished_requests():
        done.update({o.request_id: o.outputs[0] for o in engine.step() if o.finished})
    return done


def _bits(t) -> np.ndarray:
    return np.asarray(t).view(np.uint32)


def test_padded_graph_rows_equal_eager_rows(deployment):
    eager, graphed = _engine(deployment, None), _engine(deployment, (1, 2, 4, 8))
    want, got = _generate(eager, 5), _generate(graphed, 5)
    assert graphed.runner.stats()["graph_steps"] == 4  # 5 requests pad to bucket 8
    assert graphed.runner.stats()["graphs_captured"] == 1
    for rid, w in want.items():
        g = got[rid]
        assert g.token_ids == w.token_ids
        assert np.array_equal(_bits(g.logits), _bits(w.logits))
        assert g.logits_digests == w.logits_digests == [logits_digest(r) for r in g.logits]
    real = BLOCKS * BLOCK
    for a, b in zip(eager.runner.kv_cache.k + eager.runner.kv_cache.v,
                    graphed.runner.kv_cache.k + graphed.runner.kv_cache.v, strict=True):  # fmt: skip
        assert torch.equal(a.view(torch.int32), b[:real].view(torch.int32))
        assert b.shape[0] == real + BLOCK and b[real:].abs().sum() > 0  # the sink was written


def _decode_step(positions: list[int]) -> SchedulerOutput:
    """One decode token per request; request i owns blocks 3i, 3i + 1, 3i + 2."""
    scheduled = tuple(
        ScheduledRequest(f"q{i}", (11 + i,), p, tuple(range(3 * i, 3 * i + 3)), True)
        for i, p in enumerate(positions)
    )
    return SchedulerOutput(scheduled, (), len(scheduled))


def test_padding_writes_only_the_sink(deployment):
    config = GraphConfig(True, (1, 4), capture_at_start=True)
    runner = ModelRunner(deployment.model, BLOCK, BLOCKS, config, deployment.max_model_len)
    real = BLOCKS * BLOCK
    k0 = runner.kv_cache.k[0]
    assert k0[:real].abs().sum() == 0 and k0[real:].abs().sum() > 0  # capture: sink only
    for layer in runner.kv_cache.k + runner.kv_cache.v:
        layer[:real].normal_()
    before = [t.clone() for t in runner.kv_cache.k + runner.kv_cache.v]
    positions = [20, 5, 40]  # 3 requests: bucket 4, one padding row
    rows = runner.execute(_decode_step(positions))
    assert runner.stats() == {"graph_steps": 1, "eager_steps": 0, "graphs_captured": 2}
    assert list(rows) == ["q0", "q1", "q2"]
    written = {(3 * i + p // BLOCK) * BLOCK + p % BLOCK for i, p in enumerate(positions)}
    for old, new in zip(before, runner.kv_cache.k + runner.kv_cache.v, strict=True):
        changed = set(torch.nonzero((old != new).any(-1).any(-1)).flatten().tolist())
        assert changed - set(range(real, real + BLOCK)) == written


def test_static_buffers_hold_the_step_and_padding():
    bufs = DecodeBuffers(8, 4, BLOCK, sink_block=9, device=torch.device("cpu"), attention_group=2)
    bufs.fill(_decode_step([3, 33]).scheduled, 4)
    batch = bufs.batch(4)
    assert batch.input_ids.tolist() == [11, 12, 0, 0]
    assert batch.positions.tolist() == [3, 33, 0, 0]
    assert batch.slot_mapping.tolist() == [3, (3 + 2) * BLOCK + 1, 9 * BLOCK, 9 * BLOCK]
    assert batch.seq_lens.tolist() == [4, 34, 1, 1]
    assert batch.block_tables[:, :3].tolist() == [[0, 1, 2], [3, 4, 5], [9, 9, 9], [9, 9, 9]]
    meta = batch.attn
    assert meta.num_programs == 4 and meta.block_m == 16
    assert meta.positions.tolist() == [3, 33, 0, 0] and meta.query_end.tolist() == [1, 2, 3, 4]
    assert all(t.data_ptr() % 16 == 0 for t in (batch.input_ids, batch.slot_mapping,
               batch.position_ids, meta.positions, meta.query_end, meta.block_tables))  # fmt: skip
    with pytest.raises(ValueError):
        bufs.fill(_decode_step([1, 2, 3]).scheduled, 2)


def test_fallbacks_run_eagerly_and_are_announced_once(deployment, caplog):
    engine = _engine(deployment, (1, 2), max_num_seqs=8)  # 3 decoding requests: too large
    with caplog.at_level(logging.INFO, logger="samebits.graphs"):
        _generate(engine, 3, max_tokens=4)
    stats = engine.runner.stats()
    assert stats["graph_steps"] == 0 and stats["eager_steps"] >= 4
    said = [r.getMessage() for r in caplog.records if r.name == "samebits.graphs"]
    assert sum(TOO_LARGE in m for m in said) == 1 and sum(NOT_DECODE in m for m in said) == 1


def test_graphs_never_skip_a_digest(deployment):
    engine = _engine(deployment, (1, 2, 4, 8))
    for out in _generate(engine, 6, max_tokens=7).values():
        assert len(out.logits_digests) == len(out.token_ids) == 7
