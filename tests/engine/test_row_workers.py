"""Per-row host work on worker threads: the same tokens, digests and logprobs as inline, in
input order, with a failing row isolated in its place."""

from __future__ import annotations

import numpy as np
import pytest

from samebits import LLM, SamplingParams
from samebits.engine import row_workers
from samebits.outputs import RequestOutputKind, logits_digest


def test_map_rows_keeps_order_and_isolates_errors():
    rng = np.random.default_rng(0)
    rows = [(str(i), rng.standard_normal(1 << 16).astype(np.float32)) for i in range(9)]

    def work(rid: str, row: np.ndarray) -> str:
        if rid == "4":
            raise ValueError("row 4 is bad")
        return logits_digest(row)

    out = row_workers.map_rows(work, rows)
    assert out[:4] + out[5:] == [logits_digest(r) for _, r in rows[:4] + rows[5:]]
    assert isinstance(out[4], ValueError)


@pytest.mark.parametrize("threshold", [0, 1 << 62])
def test_threaded_and_inline_steps_agree(tiny_llama_dir, monkeypatch, threshold):
    monkeypatch.setattr(row_workers, "PARALLEL_MIN_ELEMENTS", threshold)
    llm = LLM(str(tiny_llama_dir), max_num_batched_tokens=64, num_kv_blocks=64, block_size=4)
    params = SamplingParams(max_tokens=6, temperature=0.9, top_p=0.9, seed=5, logprobs=2)
    outs = llm.generate([f"prompt number {i}" for i in range(12)], params)
    got = [(c.token_ids, c.logits_digests, c.logprobs) for o in outs for c in o.outputs]
    monkeypatch.setattr(row_workers, "PARALLEL_MIN_ELEMENTS", 1 << 62 if threshold == 0 else 0)
    again = LLM(engine=type(llm.engine).from_deployment(llm.engine.deployment, num_kv_blocks=64))
    ref = [(c.token_ids, c.logits_digests, c.logprobs) for o in again.generate(
        [f"prompt number {i}" for i in range(12)], params) for c in o.outputs]  # fmt: skip
    assert got == ref


def test_digest_later_is_the_digest(monkeypatch):
    row = np.random.default_rng(1).standard_normal(1 << 16).astype(np.float32)
    pending = row_workers.digest_later(logits_digest, row)
    assert not isinstance(pending, str)  # a large row: hashed on a worker
    assert row_workers.resolved([pending, "abc"]) == [logits_digest(row), "abc"]
    assert row_workers.digest_later(logits_digest, row[:100]) == logits_digest(row[:100])


def test_digests_in_flight_across_steps_stay_exact(tiny_llama_dir, monkeypatch):
    """Every digest computed on a worker, async scheduling, at most one step of digests in
    flight: the outputs (FINAL_ONLY and streamed DELTA) are those of the inline engine."""
    import samebits.engine.output_processor as engine_module

    params = SamplingParams(max_tokens=6, temperature=0.0, seed=5)
    prompts = [f"prompt number {i}" for i in range(6)]
    ref = LLM(str(tiny_llama_dir), num_kv_blocks=64).generate(prompts, params)
    monkeypatch.setattr(row_workers, "PARALLEL_MIN_ELEMENTS", 0)
    monkeypatch.setattr(engine_module, "DIGEST_STEPS_AHEAD", 1)
    llm = LLM(str(tiny_llama_dir), num_kv_blocks=64, async_scheduling=True)
    got = llm.generate(prompts, params)
    assert [o.outputs[0].logits_digests for o in got] == [o.outputs[0].logits_digests for o in ref]
    streamed: dict[str, list[str]] = {}
    for out in llm.generate_stream(prompts, params, output_kind=RequestOutputKind.DELTA):
        streamed.setdefault(out.request_id, []).extend(out.outputs[0].logits_digests)
    assert sorted(streamed.values()) == sorted(o.outputs[0].logits_digests for o in ref)


def test_final_outputs_held_for_slow_digests_are_reported_later_and_equal(
    tiny_llama_dir, monkeypatch
):
    """A finished FINAL_ONLY request whose digests are still computing is held (the step does
    not wait for them) and reported by a later step: every output equals the inline engine's,
    each request is reported once, an aborted held request is dropped, and the engine reports
    unfinished work until the held outputs are out."""
    import time

    import samebits.engine.output_processor as engine_module

    params = [SamplingParams(max_tokens=2 + i, temperature=0.0, seed=i) for i in range(6)]
    prompts = [f"prompt number {i}" for i in range(6)]
    ref = LLM(str(tiny_llama_dir), num_kv_blocks=64).generate(prompts, params)
    real = engine_module.logits_digest
    monkeypatch.setattr(row_workers, "PARALLEL_MIN_ELEMENTS", 0)
    monkeypatch.setattr(engine_module, "logits_digest", lambda row: time.sleep(0.05) or real(row))
    llm = LLM(str(tiny_llama_dir), num_kv_blocks=64)
    got = llm.generate(prompts, params)
    assert llm.engine.num_held_outputs >= 3
    assert [o.outputs[0].token_ids for o in got] == [o.outputs[0].token_ids for o in ref]
    assert [o.outputs[0].logits_digests for o in got] == [o.outputs[0].logits_digests for o in ref]
    assert [o.outputs[0].text for o in got] == [o.outputs[0].text for o in ref]

    engine = llm.engine
    final = RequestOutputKind.FINAL_ONLY
    for i, prompt in enumerate(prompts[:2]):
        engine.add_request(f"h{i}", prompt, params[0], output_kind=final)
    reported: list[str] = []
    while not engine.output_processor.held and engine.scheduler.has_unfinished_requests():
        reported += [o.request_id for o in engine.step()]
    held = list(engine.output_processor.held)
    assert held and engine.has_unfinished_requests()
    engine.abort_request(held[0])
    while engine.has_unfinished_requests():
        reported += [o.request_id for o in engine.step()]
    assert held[0] not in reported and sorted(reported) == sorted({"h0", "h1"} - {held[0]})
