"""Output kinds (issue 10.6): DELTA outputs carry only what is new, and concatenated they are
the CUMULATIVE outputs bit for bit; FINAL_ONLY gives the final cumulative output once.

The same workload runs on three fresh engines over one deployment (the output kind changes
no scheduling decision, so their steps line up): at every step, the concatenation of a
request's deltas so far equals its cumulative output of that step — token ids, text (held
back while a stop string may be forming), logits digests, logprobs, logits rows, prompt
logprobs, finish and stop reasons.
"""

from __future__ import annotations

import numpy as np
import pytest

from samebits.engine.engine import LLMEngine
from samebits.engine.output_processor import _shown_length
from samebits.outputs import RequestOutputKind
from samebits.sampling import SamplingParams

PROMPTS = [
    "The quick brown fox",
    "def add(a, b):",
    "Ünïcödé → 日本語",
    "Hello world! Hello there",
    "to be or not to be",
    "Numbers 12345 and",
]


@pytest.fixture(scope="module")
def base_engine(tiny_llama_dir):
    return LLMEngine.from_args(
        str(tiny_llama_dir), max_num_seqs=4, max_num_batched_tokens=24, block_size=4,
        num_kv_blocks=48,
    )  # fmt: skip


def fresh(base: LLMEngine) -> LLMEngine:
    """A new scheduler and KV cache over the same deployment (small: forces preemptions)."""
    return LLMEngine.from_deployment(
        base.deployment, max_num_seqs=4, max_num_batched_tokens=24, block_size=4,
        num_kv_blocks=32,
    )  # fmt: skip


def run(engine: LLMEngine, workload, kind: RequestOutputKind) -> list[list]:
    """Outputs of every step (the workload's requests added before the first)."""
    for rid, prompt, params in workload:
        engine.add_request(rid, prompt, params, output_kind=kind)
    steps = []
    while engine.has_unfinished_requests():
        steps.append(engine.step())
        assert not engine.pop_failures()
    run.preemptions = engine.stats()["num_preemptions"]
    return steps


def texts_of(base: LLMEngine) -> dict[str, str]:
    """What each prompt generates unstopped (seeded sampling), to pick stop strings from."""
    engine = fresh(base)
    params = SamplingParams(max_tokens=40, temperature=0.9, seed=5, ignore_eos=True)
    work = [(str(i), p, params) for i, p in enumerate(PROMPTS)]
    final = {}
    for step in run(engine, work, RequestOutputKind.CUMULATIVE):
        for out in step:
            final[out.request_id] = out.outputs[0].text
    return final


@pytest.fixture(scope="module")
def workload(base_engine):
    texts = texts_of(base_engine)
    mid = {rid: t[len(t) // 2 : len(t) // 2 + 3] for rid, t in texts.items()}
    late = texts["3"][-4:-1]  # near the end: after min_tokens outputs
    assert all(len(s) == 3 for s in mid.values()), texts
    sampled = dict(max_tokens=40, temperature=0.9, seed=5, ignore_eos=True)
    return [
        ("greedy", PROMPTS[0], SamplingParams(
            max_tokens=30, temperature=0.0, seed=0, logprobs=3, return_logits=True)),
        ("stop-3", PROMPTS[0], SamplingParams(stop=[mid["0"]], logprobs=2, **sampled)),
        ("stop-in", PROMPTS[1], SamplingParams(
            stop=["zzzzzzzz", mid["1"]], include_stop_str_in_output=True, **sampled)),
        ("stop-1", PROMPTS[2], SamplingParams(stop=[mid["2"][0]], **sampled)),
        ("min-tok", PROMPTS[3], SamplingParams(stop=[late], min_tokens=25, **sampled)),
        ("never", PROMPTS[4], SamplingParams(stop=["\x00never stop\x00"], **sampled)),
        ("prompt-lp", PROMPTS[5], SamplingParams(prompt_logprobs=2, logprobs=1, **sampled)),
        ("eos", PROMPTS[4], SamplingParams(max_tokens=60, temperature=1.0, seed=9)),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def three_runs(base_engine, workload):
    runs = {}
    for kind in RequestOutputKind:
        runs[kind] = run(fresh(base_engine), workload, kind)
        assert run.preemptions > 0  # the small cache preempts (and recomputes) requests
    return runs


class Joined:
    """A request's deltas, concatenated."""

    def __init__(self) -> None:
        self.token_ids: list[int] = []
        self.text = ""
        self.digests: list[str] = []
        self.logprobs: list[dict[int, float]] = []
        self.rows: list[np.ndarray] = []
        self.prompt_logprobs = None
        self.count = 0

    def add(self, out) -> None:
        c = out.outputs[0]
        assert (out.prompt_logprobs is not None) == (
            self.count == 0 and out.prompt_logprobs is not None
        )
        if self.count == 0:
            self.prompt_logprobs = out.prompt_logprobs
        self.count += 1
        self.token_ids += c.token_ids
        self.text += c.text
        self.digests += c.logits_digests
        if c.logprobs is not None:
            self.logprobs += c.logprobs
        if c.logits is not None:
            self.rows += list(c.logits)


def test_the_three_kinds_step_alike(three_runs):
    lengths = {kind: len(steps) for kind, steps in three_runs.items()}
    assert len(set(lengths.values())) == 1, lengths
    assert lengths[RequestOutputKind.CUMULATIVE] > 40
    assert any(not step for step in three_runs[RequestOutputKind.FINAL_ONLY])


def test_deltas_concatenate_to_the_cumulative_output_at_every_step(three_runs, workload):
    cumulative, deltas = (
        three_runs[RequestOutputKind.CUMULATIVE],
        three_runs[RequestOutputKind.DELTA],
    )
    joined = {rid: Joined() for rid, _, _ in workload}
    finished = set()
    for step_c, step_d in zip(cumulative, deltas, strict=True):
        assert [o.request_id for o in step_c] == [o.request_id for o in step_d]
        for cum, delta in zip(step_c, step_d, strict=True):
            j = joined[cum.request_id]
            j.add(delta)
            c, d = cum.outputs[0], delta.outputs[0]
            assert j.token_ids == c.token_ids
            assert j.text == c.text
            assert j.digests == c.logits_digests
            assert (d.logprobs is None) == (c.logprobs is None)
            if c.logprobs is not None:
                assert j.logprobs == c.logprobs  # floats compared exactly
                assert d.cumulative_logprob == c.cumulative_logprob
            if c.logits is not None:
                assert np.array_equal(np.stack(j.rows), c.logits)
                assert np.stack(j.rows).tobytes() == c.logits.tobytes()
            assert j.prompt_logprobs == cum.prompt_logprobs
            assert delta.prompt_token_ids == cum.prompt_token_ids
            assert (d.finish_reason, d.stop_reason, delta.finished) == (
                c.finish_reason, c.stop_reason, cum.finished,
            )  # fmt: skip
            if cum.finished:
                finished.add(cum.request_id)
    assert finished == set(joined)
    reasons = {rid: None for rid in joined}
    for step in cumulative:
        for out in step:
            reasons[out.request_id] = out.outputs[0].stop_reason
    # the stop strings did stop their requests (picked from the unstopped texts)
    assert all(isinstance(reasons[r], str) for r in ("stop-3", "stop-in", "stop-1", "min-tok"))
    assert reasons["never"] is None


def test_final_only_is_the_last_cumulative_output(three_runs):
    last = {}
    for step in three_runs[RequestOutputKind.CUMULATIVE]:
        for out in step:
            last[out.request_id] = out
    final = [out for step in three_runs[RequestOutputKind.FINAL_ONLY] for out in step]
    assert sorted(o.request_id for o in final) == sorted(last)
    for out in final:
        assert out.finished
        assert out == last[out.request_id]  # dataclass equality: every field but logits
        c, ref = out.outputs[0], last[out.request_id].outputs[0]
        if ref.logits is not None:
            assert c.logits.tobytes() == ref.logits.tobytes()


def test_cumulative_text_only_grows(three_runs):
    for step_outputs in [three_runs[RequestOutputKind.CUMULATIVE]]:
        previous: dict[str, str] = {}
        for step in step_outputs:
            for out in step:
                text = out.outputs[0].text
                assert text.startswith(previous.get(out.request_id, "")), out.request_id
                previous[out.request_id] = text


def test_shown_length_never_negative():
    """A text shorter than the hold (longest stop - 1) shows nothing; before, a negative
    slice end showed part of it and took it back later (streamed text went backwards)."""
    stops = ["abcdefgh"]
    assert [_shown_length("x" * n, stops) for n in range(10)] == [0] * 8 + [1, 2]
    assert _shown_length("xyz", []) == 3


def test_delta_output_size_does_not_grow_with_the_request(base_engine):
    """A long generation in DELTA: every decode step hands out one token, one digest, one
    logprobs dict and only the new text, at token 10 as at token 240; nothing earlier is
    copied (the lists handed out are fresh objects each step; the prompt list is shared)."""
    engine = LLMEngine.from_deployment(base_engine.deployment, block_size=4, num_kv_blocks=80)
    params = SamplingParams(max_tokens=240, temperature=0.0, ignore_eos=True, logprobs=2)
    engine.add_request("long", "The quick brown fox", params, output_kind=RequestOutputKind.DELTA)
    outputs = []
    while engine.has_unfinished_requests():
        outputs.extend(engine.step())
    assert len(outputs) == 240
    seen_lists = set()
    for out in outputs:
        c = out.outputs[0]
        assert len(c.token_ids) == len(c.logits_digests) == len(c.logprobs) == 1
        for lst in (c.token_ids, c.logits_digests, c.logprobs):
            assert id(lst) not in seen_lists
            seen_lists.add(id(lst))
        assert out.prompt_token_ids is outputs[0].prompt_token_ids
    tokens = [t for o in outputs for t in o.outputs[0].token_ids]
    # each character is handed out once (text held back while a character is incomplete)
    assert "".join(o.outputs[0].text for o in outputs) == engine.tokenizer.decode(tokens)
    # the engine keeps no pending rows for a DELTA request once handed out
    assert not engine.output_processor.request_states


def test_output_kind_must_be_an_output_kind(base_engine):
    engine = fresh(base_engine)
    with pytest.raises(TypeError, match="RequestOutputKind"):
        engine.add_request("x", [1, 2], SamplingParams(), output_kind="delta")
    assert not engine.has_unfinished_requests()
