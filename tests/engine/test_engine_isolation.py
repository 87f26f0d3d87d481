"""LLMEngine: an exception inside one request fails that request only."""

from __future__ import annotations

import pytest

from samebits.deployment import build_deployment
from samebits.engine.engine import LLMEngine
from samebits.model import load_model
from samebits.sampling import SamplingParams
from samebits.testing.drive import run_until_done


@pytest.fixture(scope="module")
def deployment(tiny_llama_dir):
    return build_deployment(load_model(tiny_llama_dir), "invariant")


def test_one_failing_request_leaves_the_others_intact(deployment, monkeypatch):
    params = SamplingParams(max_tokens=5, ignore_eos=True, seed=1)
    alone = LLMEngine.from_deployment(deployment)
    alone.add_request("ok", [1, 2, 3], params)
    expected = run_until_done(alone)["ok"].outputs[0]

    engine = LLMEngine.from_deployment(deployment, num_kv_blocks=64, block_size=4)
    real_sample = engine._sample

    def flaky(rid, row):
        if (
            rid == "bad"
            and engine.output_processor.request_states[rid].request.num_output_tokens == 2
        ):
            raise FloatingPointError("poisoned row")
        return real_sample(rid, row)

    monkeypatch.setattr(engine, "_sample", flaky)
    engine.add_request("bad", [4, 5, 6, 7], params)
    engine.add_request("ok", [1, 2, 3], params)
    finished = run_until_done(engine)
    failures = engine.pop_failures()
    assert list(failures) == ["bad"] and isinstance(failures["bad"], FloatingPointError)
    assert "bad" not in finished
    got = finished["ok"].outputs[0]
    assert got.token_ids == expected.token_ids and got.logits_digests == expected.logits_digests
    engine.scheduler.check_integrity()
    assert engine.scheduler.make_stats().num_free_blocks == 64
