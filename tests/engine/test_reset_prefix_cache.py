"""`reset_prefix_cache` (vLLM's name): a second run of a prompt hits the prefix cache; after a
reset it recomputes the prompt, with the same bits. Refused (False, nothing dropped) while a
request runs."""

from __future__ import annotations

import pytest

from samebits.engine.engine import LLMEngine
from samebits.sampling import SamplingParams

PROMPT = list(range(3, 40))


@pytest.fixture(scope="module")
def engine(tiny_llama_dir):
    return LLMEngine.from_args(
        str(tiny_llama_dir), max_num_seqs=4, max_num_batched_tokens=64, block_size=4,
        num_kv_blocks=64,
    )  # fmt: skip


def _run(engine: LLMEngine, rid: str) -> tuple:
    engine.add_request(rid, PROMPT, SamplingParams(max_tokens=3, temperature=0.0, seed=1))
    final = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                final = out.outputs[0]
    return tuple(final.token_ids), tuple(final.logits_digests)


def _hits(engine: LLMEngine) -> int:
    return engine.scheduler.prefix_cache_hits


def test_reset_prefix_cache_makes_the_next_run_cold(engine) -> None:
    first = _run(engine, "a")
    before = _hits(engine)
    assert _run(engine, "b") == first
    assert _hits(engine) > before  # a warm run
    assert engine.reset_prefix_cache()
    before = _hits(engine)
    assert _run(engine, "c") == first
    assert _hits(engine) == before  # cold: the prompt was recomputed
    engine.scheduler.kv_cache_manager.block_pool.check_integrity()


def test_reset_prefix_cache_refused_while_a_request_runs(engine) -> None:
    _run(engine, "d")
    engine.add_request("e", PROMPT, SamplingParams(max_tokens=3, temperature=0.0, seed=1))
    engine.step()
    assert not engine.reset_prefix_cache()
    while engine.has_unfinished_requests():
        engine.step()
    before = _hits(engine)
    _run(engine, "f")
    assert _hits(engine) > before  # the refused reset dropped nothing
