"""Scoring in the engine: `prompt_logprobs` are bitwise those of the cold batch-of-one forward
whatever the batching, chunking, prefix-cache state or preemptions; `logit_bias` and
`min_tokens` act in the sampler (pure functions of the row and the params).

Bitwise claims on logprobs compare float64 arrays with `same_bits` (bytes, so -0.0 and NaN
would count too), not Python float equality.
"""

from __future__ import annotations

import numpy as np
import pytest

from samebits.bits import same_bits
from samebits.deployment import build_deployment
from samebits.engine.engine import LLMEngine
from samebits.engine.runner import cold_logits
from samebits.model import load_model
from samebits.sampling import SamplingParams, compute_logprobs

K = 3


@pytest.fixture(scope="module")
def dep(tiny_llama_dir):
    return build_deployment(load_model(str(tiny_llama_dir)), "invariant")


def _prompts(vocab: int) -> list[list[int]]:
    rng = np.random.default_rng(7)
    shared = [int(t) for t in rng.integers(0, vocab, 21)]
    return [
        shared + [int(t) for t in rng.integers(0, vocab, n)]
        for n in (0, 1, 5, 13)  # all share a prefix of 21 tokens (cacheable blocks)
    ] + [[int(t) for t in rng.integers(0, vocab, n)] for n in (1, 2, 9, 40)]


def _expected(dep, prompt: list[int]) -> list[dict[int, float] | None]:
    rows = cold_logits(dep, prompt, all_rows=True)
    return [None] + [compute_logprobs(rows[p - 1], prompt[p], K) for p in range(1, len(prompt))]


def _as_arrays(lps: list[dict[int, float] | None]) -> tuple[list, np.ndarray]:
    """(ids per position, float64 values in that order) of a prompt-logprobs list."""
    ids = [None if lp is None else list(lp) for lp in lps]
    values = [v for lp in lps if lp is not None for v in lp.values()]
    return ids, np.array(values, dtype=np.float64)


def _assert_same(got, want, label: str) -> None:
    assert got is not None and got[0] is None, label
    got_ids, got_values = _as_arrays(got)
    want_ids, want_values = _as_arrays(want)
    assert got_ids == want_ids, label
    assert same_bits(got_values, want_values), label


def _run(engine: LLMEngine, jobs: list[tuple[str, list[int], SamplingParams]], stagger: int = 0):
    """Add jobs (all at once, or one every `stagger` steps) and run to completion."""
    final = {}
    pending = list(jobs)
    step = 0
    while pending or engine.has_unfinished_requests():
        if pending and (stagger == 0 or step % stagger == 0):
            batch = pending if stagger == 0 else pending[:1]
            for rid, prompt, params in batch:
                engine.add_request(rid, prompt, params)
            pending = pending[len(batch) :]
        for out in engine.step():
            if out.finished:
                final[out.request_id] = out
        step += 1
    assert not engine.pop_failures()
    return final


CONFIGS = [
    # (label, engine kwargs, stagger)
    ("one budget fits all", dict(max_num_batched_tokens=512, block_size=16), 0),
    ("budget 5 chunks every prompt", dict(max_num_batched_tokens=5, block_size=4), 0),
    ("budget 16, staggered arrivals", dict(max_num_batched_tokens=16, block_size=8), 1),
    ("budget 7, no prefix caching", dict(max_num_batched_tokens=7, enable_prefix_caching=False), 0),
    (
        "cache pressure: preemptions",
        dict(max_num_batched_tokens=64, block_size=4, num_kv_blocks=24),
        0,
    ),
]


@pytest.mark.parametrize("label,kwargs,stagger", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_prompt_logprobs_bitwise_equal_cold_forward(dep, label, kwargs, stagger):
    engine = LLMEngine.from_deployment(dep, max_num_seqs=8, **kwargs)
    prompts = _prompts(dep.config.vocab_size)
    # Warm the prefix cache with the shared prefix (and generated tokens) first.
    _run(engine, [("warm", prompts[3], SamplingParams(max_tokens=4, seed=1))])
    jobs = []
    for i, prompt in enumerate(prompts):
        scoring = SamplingParams(max_tokens=3, seed=i, prompt_logprobs=K, temperature=0.8)
        jobs.append((f"score-{i}", prompt, scoring))
        jobs.append((f"plain-{i}", prompt, SamplingParams(max_tokens=6, seed=100 + i)))
    final = _run(engine, jobs, stagger)
    for i, prompt in enumerate(prompts):
        out = final[f"score-{i}"]
        assert len(out.prompt_logprobs) == len(prompt)
        _assert_same(out.prompt_logprobs, _expected(dep, prompt), f"{label}: prompt {i}")
        assert final[f"plain-{i}"].prompt_logprobs is None
    if "preemptions" in label:
        assert engine.scheduler.num_preemptions > 0
    engine.scheduler.check_integrity()


def test_prompt_logprobs_request_takes_no_prefix_cache_hit(dep):
    engine = LLMEngine.from_deployment(dep, block_size=4)
    prompt = _prompts(dep.config.vocab_size)[2]
    _run(engine, [("a", prompt, SamplingParams(max_tokens=2, seed=1))])
    hits = engine.scheduler.prefix_cache_hits
    _run(engine, [("b", prompt, SamplingParams(max_tokens=2, seed=1, prompt_logprobs=0))])
    assert engine.scheduler.prefix_cache_hits == hits  # it computed its whole prompt
    _run(engine, [("c", prompt, SamplingParams(max_tokens=2, seed=1))])
    assert engine.scheduler.prefix_cache_hits > hits  # a plain request still hits


def test_prompt_logprobs_zero_and_sampled_token_first(dep):
    engine = LLMEngine.from_deployment(dep)
    prompt = _prompts(dep.config.vocab_size)[5]
    out = _run(engine, [("z", prompt, SamplingParams(max_tokens=1, prompt_logprobs=0))])["z"]
    assert [None if lp is None else list(lp) for lp in out.prompt_logprobs] == [None] + [
        [t] for t in prompt[1:]
    ]
    one = _run(engine, [("o", [prompt[0]], SamplingParams(max_tokens=1, prompt_logprobs=2))])
    assert one["o"].prompt_logprobs == [None]


def test_sampled_rows_unchanged_by_all_rows_chunks(dep):
    """Asking for every row of a chunk does not change the sampled row (same digests)."""
    prompt = _prompts(dep.config.vocab_size)[4]
    params = SamplingParams(max_tokens=5, seed=3, temperature=0.9)
    outs = []
    for prompt_logprobs in (None, 4):
        engine = LLMEngine.from_deployment(dep, max_num_batched_tokens=6, block_size=4)
        p = SamplingParams.from_dict({**params.to_dict(), "prompt_logprobs": prompt_logprobs})
        outs.append(_run(engine, [("r", prompt, p)])["r"].outputs[0])
    assert outs[0].token_ids == outs[1].token_ids
    assert outs[0].logits_digests == outs[1].logits_digests


def test_logit_bias_forces_a_token_and_is_validated(dep):
    engine = LLMEngine.from_deployment(dep)
    prompt = _prompts(dep.config.vocab_size)[6]
    target = 17
    for temperature in (0.0, 1.0):
        params = SamplingParams(
            max_tokens=5, seed=4, temperature=temperature, logit_bias={target: 100.0}
        )
        out = _run(engine, [(f"b{temperature}", prompt, params)])[f"b{temperature}"]
        assert out.outputs[0].token_ids == [target] * 5
    banned = _run(engine, [("g", prompt, SamplingParams(max_tokens=4, temperature=0.0))])["g"]
    first = banned.outputs[0].token_ids[0]
    params = SamplingParams(max_tokens=4, temperature=0.0, logit_bias={first: -100})
    out = _run(engine, [("nb", prompt, params)])["nb"].outputs[0]
    assert first not in out.token_ids
    with pytest.raises(ValueError, match="logit_bias token id"):
        engine.add_request("x", prompt, SamplingParams(logit_bias={dep.config.vocab_size: 1.0}))


def test_logprobs_see_the_raw_row_not_the_bias(dep):
    engine = LLMEngine.from_deployment(dep)
    prompt = _prompts(dep.config.vocab_size)[6]
    plain = SamplingParams(max_tokens=1, temperature=0.0, logprobs=2, seed=1)
    biased = SamplingParams.from_dict({**plain.to_dict(), "logit_bias": [[5, 100.0]]})
    a = _run(engine, [("a", prompt, plain)])["a"].outputs[0]
    b = _run(engine, [("b", prompt, biased)])["b"].outputs[0]
    assert b.token_ids == [5]
    assert a.logits_digests == b.logits_digests  # the same raw row
    assert b.logprobs[0][5] == compute_logprobs(cold_logits(dep, prompt), 5, 0)[5]


def test_min_tokens_masks_eos_until_reached(dep):
    engine = LLMEngine.from_deployment(dep)
    eos = engine.tokenizer.eos_token_ids[0]
    prompt = _prompts(dep.config.vocab_size)[6]
    bias = {eos: 100.0}  # EOS would win at every position
    base = SamplingParams(max_tokens=8, temperature=0.0, logit_bias=bias, seed=2)
    out = _run(engine, [("a", prompt, base)])["a"].outputs[0]
    assert out.token_ids == [eos] and out.finish_reason == "stop"
    params = SamplingParams.from_dict({**base.to_dict(), "min_tokens": 3})
    out = _run(engine, [("b", prompt, params)])["b"].outputs[0]
    assert len(out.token_ids) == 4 and eos not in out.token_ids[:3]
    assert out.token_ids[3] == eos and out.finish_reason == "stop"
    stop = SamplingParams(max_tokens=8, temperature=0.0, seed=2, min_tokens=2, ignore_eos=True)
    first_two = _run(engine, [("c", prompt, stop)])["c"].outputs[0].token_ids[:2]
    masked = SamplingParams.from_dict(
        {**stop.to_dict(), "stop_token_ids": [first_two[0]], "max_tokens": 3}
    )
    out = _run(engine, [("d", prompt, masked)])["d"].outputs[0]
    assert out.token_ids[0] != first_two[0]  # a stop token id is masked before min_tokens


def test_scheduler_marks_prompt_chunks_all_rows_and_skips_the_cache():
    from samebits.engine.request import Request
    from samebits.engine.scheduler import Scheduler

    scheduler = Scheduler(
        max_num_seqs=4, max_num_batched_tokens=4, max_model_len=64, block_size=2,
        num_kv_blocks=32,
    )  # fmt: skip

    def run(request: Request) -> list[tuple[int, int, bool, bool]]:
        scheduler.add_request(request)
        chunks = []
        while scheduler.has_unfinished_requests():
            out = scheduler.schedule()
            chunks += [(s.start_position, len(s.token_ids), s.sample, s.all_rows)
                       for s in out.scheduled]  # fmt: skip
            scheduler.update_from_output(out, {s.request_id: 1 for s in out.scheduled if s.sample})
        return chunks

    prompt = [3, 4, 5, 6, 7, 8, 9]
    assert run(Request("a", prompt, max_tokens=2)) == [
        (0, 4, False, False), (4, 3, True, False), (7, 1, True, False)
    ]  # fmt: skip
    scored = run(Request("b", prompt, max_tokens=2, needs_prompt_rows=True))
    assert scored == [(0, 4, False, True), (4, 3, True, True), (7, 1, True, False)]
    assert scheduler.prefix_cache_queries == len(prompt) and scheduler.prefix_cache_hits == 0
    assert run(Request("c", prompt, max_tokens=2))[0] == (6, 1, True, False)  # a hit of 6
