"""LLM surfaces a request's failure inside the engine as `RequestFailedError` (issue 10, #2),
for generate, generate_stream and chat, and leaves no request of the call in the engine."""

from __future__ import annotations

import pytest

from samebits import LLM, SamplingParams
from samebits.deployment import build_deployment
from samebits.engine.engine import LLMEngine
from samebits.llm import RequestFailedError
from samebits.model import load_model

BAD = [7, 7, 7, 7, 7]
PARAMS = SamplingParams(max_tokens=6, ignore_eos=True, seed=3)
NUM_KV_BLOCKS = 64


@pytest.fixture(scope="module")
def deployment(tiny_llama_dir):
    return build_deployment(load_model(tiny_llama_dir), "invariant")


@pytest.fixture
def llm(deployment):
    engine = LLMEngine.from_deployment(
        deployment, max_num_batched_tokens=32, num_kv_blocks=NUM_KV_BLOCKS, block_size=4
    )
    return LLM(engine=engine)


def _poison(monkeypatch, engine: LLMEngine, bad_prompt, at_token: int = 2, where="_sample"):
    """Make `where` (the sampler or the detokenizer step) raise for requests whose prompt ids
    are `bad_prompt` once they have `at_token` outputs."""
    text = where == "_append_text"  # the output processor's, called with the request state
    owner = engine.output_processor if text else engine
    real = getattr(owner, where)

    def flaky(first, *args):
        state = first if text else engine.output_processor.request_states[first]
        request = state.request
        done = request.num_output_tokens - text
        if list(request.prompt_token_ids) == list(bad_prompt) and done == at_token:
            raise FloatingPointError("poisoned row")
        return real(first, *args)

    monkeypatch.setattr(owner, where, flaky)


def _assert_clean(llm: LLM) -> None:
    engine = llm.engine
    assert not engine.has_unfinished_requests()
    assert not engine.output_processor.request_states
    assert engine.pop_failures() == {}
    engine.scheduler.check_integrity()
    assert engine.scheduler.make_stats().num_free_blocks == NUM_KV_BLOCKS


def _still_usable(llm: LLM) -> None:
    expected = LLM(engine=LLMEngine.from_deployment(llm.engine.deployment)).generate(
        [[1, 2, 3]], PARAMS
    )
    got = llm.generate([[1, 2, 3]], PARAMS)
    assert got[0].outputs[0].token_ids == expected[0].outputs[0].token_ids
    assert got[0].outputs[0].logits_digests == expected[0].outputs[0].logits_digests


@pytest.mark.parametrize("where", ["_sample", "_append_text"])
def test_generate_raises_the_real_error_and_leaves_engine_clean(llm, monkeypatch, where):
    _poison(monkeypatch, llm.engine, BAD, where=where)
    with pytest.raises(RequestFailedError, match="prompt 1.*poisoned row") as info:
        llm.generate([[1, 2, 3], BAD, [4, 5, 6]], PARAMS)
    err = info.value
    assert isinstance(err, RuntimeError)
    assert err.index == 1 and isinstance(err.__cause__, FloatingPointError)
    assert err.request_id in str(err)
    _assert_clean(llm)
    monkeypatch.undo()
    _still_usable(llm)


def test_generate_stream_raises_at_the_failing_step(llm, monkeypatch):
    _poison(monkeypatch, llm.engine, BAD, at_token=2)
    seen = []
    with pytest.raises(RequestFailedError) as info:
        for out in llm.generate_stream([BAD, [1, 2, 3]], PARAMS):
            seen.append(out)
    assert info.value.index == 0 and isinstance(info.value.__cause__, FloatingPointError)
    bad_tokens = [len(o.outputs[0].token_ids) for o in seen if o.prompt_token_ids == BAD]
    assert bad_tokens == [1, 2]  # the step that would sample its third token raised
    assert all(not o.finished for o in seen)
    _assert_clean(llm)


def test_n_choices_one_child_failing_fails_the_prompt(llm, monkeypatch):
    engine = llm.engine
    real = engine._sample

    def flaky(rid, row):
        if (
            rid.endswith("-1")
            and list(engine.output_processor.request_states[rid].request.prompt_token_ids) == BAD
        ):
            raise FloatingPointError("poisoned row")
        return real(rid, row)

    monkeypatch.setattr(engine, "_sample", flaky)
    params = SamplingParams(n=2, max_tokens=4, ignore_eos=True, seed=9)
    with pytest.raises(RequestFailedError, match="poisoned") as info:
        llm.generate([[1, 2], BAD], params)
    assert info.value.index == 1
    _assert_clean(llm)


def test_chat_surfaces_the_failure(llm, monkeypatch):
    conversations = [
        [{"role": "user", "content": "Hello world!"}],
        [{"role": "user", "content": "to be or not to be"}],
    ]
    tok = llm.tokenizer
    bad = tok.encode(tok.apply_chat_template(conversations[1]), add_special_tokens=False)
    _poison(monkeypatch, llm.engine, bad, at_token=0, where="_append_text")
    with pytest.raises(RequestFailedError, match="poisoned") as info:
        llm.chat(conversations, SamplingParams(max_tokens=4, ignore_eos=True))
    assert info.value.index == 1
    _assert_clean(llm)


def test_abandoned_stream_aborts_its_requests(llm):
    stream = llm.generate_stream([[1, 2, 3], [4, 5]], PARAMS)
    next(stream)
    stream.close()
    _assert_clean(llm)
    _still_usable(llm)


def test_bad_prompt_later_in_the_batch_leaves_nothing_queued(llm):
    with pytest.raises(ValueError, match="empty"):
        llm.generate([[1, 2, 3], [4, 5], []], PARAMS)
    _assert_clean(llm)
    _still_usable(llm)
