"""Teacher-forced replay (`audit/forced.py`): the engine's tokens and logits digests equal a
stepwise run's, bit for bit, with the rows from forced passes whose chunks cut prompts and
outputs anywhere; a logged continuation that is wrong or short changes no replayed bit (its
rows then come from cold forwards over the replay's own history)."""

from __future__ import annotations

import pytest

from samebits import SamplingParams
from samebits.audit.forced import ForcedReplayEngine, forced_unsupported
from samebits.audit.replay import run_alone
from samebits.engine.engine import LLMEngine

PROMPT = [5, 17, 42, 9, 88, 3, 61, 12, 7, 30, 2]
PARAMS = {
    "greedy": SamplingParams(temperature=0.0, max_tokens=12, ignore_eos=True),
    "seeded": SamplingParams(
        temperature=0.9, top_p=0.9, seed=7, max_tokens=12, repetition_penalty=1.3, ignore_eos=True
    ),  # fmt: skip
    "min_tokens": SamplingParams(temperature=1.0, seed=3, max_tokens=10, min_tokens=4),
}


def _engine(model_dir, plan: str) -> LLMEngine:
    return LLMEngine.from_args(model=str(model_dir), device="cpu", kernel_plan=plan,
                               enable_prefix_caching=False, max_num_batched_tokens=8)  # fmt: skip


@pytest.fixture(scope="module", params=[("llama", "invariant"), ("gemma3_text", "invariant"),
                                        ("llama", "replay")], ids=lambda p: "-".join(p))  # fmt: skip
def engines(request):
    arch, plan = request.param
    model_dir = request.getfixturevalue(f"tiny_{arch}_dir")
    return _engine(model_dir, plan), ForcedReplayEngine(_engine(model_dir, plan), chunk=5)


def _forced(engine: ForcedReplayEngine, rid: str, params, logged: list[int]):
    engine.expect(rid, PROMPT, logged, prompt_logprobs=False)
    try:
        return run_alone(engine, rid, PROMPT, params)
    finally:
        engine.forget(rid)


@pytest.mark.parametrize("name", PARAMS)
def test_forced_rows_are_the_stepwise_rows(engines, name):
    plain, forced = engines
    params = PARAMS[name]
    tokens, digests = run_alone(plain, f"plain-{name}", PROMPT, params)
    before = dict(forced.runner.stats())
    got = _forced(forced, f"forced-{name}", params, tokens)
    assert got == (tokens, digests)
    stats = forced.runner.stats()
    assert stats["forced_forwards"] > before["forced_forwards"]  # the rows came from passes
    assert stats["forced_cold_forwards"] == before["forced_cold_forwards"]


def test_a_wrong_or_short_log_changes_no_replayed_bit(engines):
    plain, forced = engines
    params = PARAMS["seeded"]
    tokens, digests = run_alone(plain, "plain-truth", PROMPT, params)
    wrong = tokens[:4] + [(tokens[4] + 1) % 200] + tokens[5:]
    for logged in (wrong, tokens[:6]):
        before = forced.runner.stats()["forced_cold_forwards"]
        assert _forced(forced, "forced-edit", params, logged) == (tokens, digests)
        assert forced.runner.stats()["forced_cold_forwards"] > before  # past the log: Ref


def test_the_fast_plan_is_not_forced(tiny_llama_dir):
    assert forced_unsupported(_engine(tiny_llama_dir, "fast")) is not None
    assert forced_unsupported(_engine(tiny_llama_dir, "invariant")) is None


def test_a_recomputed_chunk_restarts_the_history():
    """After a preemption the scheduler recomputes from an earlier position: the pass's
    history is cut there and the match re-checked (a gap is refused)."""
    from samebits.audit.forced import ForcedPass
    from samebits.engine.scheduler import ScheduledRequest

    f = ForcedPass((1, 2, 3, 4, 5), first_row=2, kv=None)
    f.feed(ScheduledRequest("r", (1, 2, 3), 0, (0,), sample=True))
    f.feed(ScheduledRequest("r", (9,), 3, (0,), sample=True))
    assert f.history == [1, 2, 3, 9] and f.matched == 3
    f.feed(ScheduledRequest("r", (1, 2, 3, 4), 0, (0,), sample=True))
    assert f.history == [1, 2, 3, 4] and f.matched == 4
    with pytest.raises(RuntimeError, match="past its"):
        f.feed(ScheduledRequest("r", (5,), 7, (0,), sample=True))
