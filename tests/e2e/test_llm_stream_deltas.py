"""`LLM.generate_stream(..., output_kind=DELTA)`: per prompt and choice, the deltas
concatenate to what `generate` returns (which runs FINAL_ONLY requests) and to the last
CUMULATIVE stream output, bit for bit — with n > 1, stop strings and prompt logprobs."""

from __future__ import annotations

import numpy as np
import pytest

from samebits import LLM, SamplingParams
from samebits.outputs import RequestOutputKind

PROMPTS = ["The quick brown fox", "def add(a, b):", "Hello world! Hello there"]


@pytest.fixture(scope="module")
def tiny_llm(tiny_llama_dir):
    return LLM(str(tiny_llama_dir), max_num_batched_tokens=24, num_kv_blocks=96, block_size=4)


def params_for(llm: LLM) -> list[SamplingParams]:
    probe = SamplingParams(max_tokens=30, temperature=0.9, seed=17, ignore_eos=True)
    texts = [o.outputs[0].text for o in llm.generate(PROMPTS, probe)]
    return [
        SamplingParams(
            n=3, max_tokens=30, temperature=0.9, seed=17, ignore_eos=True, logprobs=2,
            prompt_logprobs=1, return_logits=True,
        ),
        SamplingParams(
            n=2, max_tokens=30, temperature=0.9, seed=17, ignore_eos=True,
            stop=[texts[1][len(texts[1]) // 2 :][:3]],
        ),
        SamplingParams(
            max_tokens=30, temperature=0.9, seed=17, ignore_eos=True,
            stop=[texts[2][len(texts[2]) // 2 :][:2], "\x00never\x00"], include_stop_str_in_output=True,
        ),
    ]  # fmt: skip


def test_deltas_concatenate_to_generate(tiny_llm):
    params = params_for(tiny_llm)
    final = tiny_llm.generate(PROMPTS, params)
    cumulative_last = {}
    for out in tiny_llm.generate_stream(PROMPTS, params):
        cumulative_last[out.request_id] = out
    parts: dict[tuple[str, int], dict] = {}
    prompt_lps: dict[str, list] = {}
    finished: set[str] = set()
    for out in tiny_llm.generate_stream(PROMPTS, params, output_kind=RequestOutputKind.DELTA):
        assert out.request_id not in finished
        if out.prompt_logprobs is not None:
            assert out.request_id not in prompt_lps  # once per prompt
            prompt_lps[out.request_id] = out.prompt_logprobs
        if out.finished:
            finished.add(out.request_id)
        for c in out.outputs:
            p = parts.setdefault((out.request_id, c.index), {"ids": [], "text": "", "dig": [],
                                                             "lps": [], "rows": []})  # fmt: skip
            p["ids"] += c.token_ids
            p["text"] += c.text
            p["dig"] += c.logits_digests
            p["lps"] += c.logprobs or []
            if c.logits is not None:
                p["rows"] += list(c.logits)
            p["finish"] = (c.finish_reason, c.stop_reason)
    assert len(finished) == len(PROMPTS)
    stream_ids = sorted({rid for rid, _ in parts}, key=int)
    stopped = 0
    for rid, whole, last in zip(stream_ids, final, cumulative_last.values(), strict=True):
        assert prompt_lps.get(rid) == whole.prompt_logprobs == last.prompt_logprobs
        for c, lc in zip(whole.outputs, last.outputs, strict=True):
            p = parts[(rid, c.index)]
            assert p["ids"] == c.token_ids == lc.token_ids
            assert p["text"] == c.text == lc.text
            assert p["dig"] == c.logits_digests == lc.logits_digests
            assert p["lps"] == (c.logprobs or []) == (lc.logprobs or [])
            assert p["finish"] == (c.finish_reason, c.stop_reason)
            if c.logits is not None:
                assert np.stack(p["rows"]).tobytes() == c.logits.tobytes()
            stopped += c.finish_reason == "stop"
    assert stopped >= 2  # the stop strings picked from the probe texts did stop


def test_delta_stream_closed_early_leaves_nothing(tiny_llm):
    stream = tiny_llm.generate_stream(
        PROMPTS, SamplingParams(n=2, max_tokens=20, seed=1), output_kind=RequestOutputKind.DELTA
    )
    next(stream)
    stream.close()
    assert not tiny_llm.engine.has_unfinished_requests()


def test_generate_stream_refuses_final_only(tiny_llm):
    with pytest.raises(ValueError, match="CUMULATIVE or DELTA"):
        next(tiny_llm.generate_stream(PROMPTS, output_kind=RequestOutputKind.FINAL_ONLY))
    assert not tiny_llm.engine.has_unfinished_requests()
