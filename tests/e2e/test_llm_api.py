"""The offline API as a user meets it: LLM.generate / chat / streaming, outputs, bad input,
and batch invariance of whole requests (tokens and digests) against running each alone."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from samebits import LLM, SamplingParams
from samebits.engine.engine import LLMEngine

QUESTIONS = [
    "What is the capital of France?", "Name three colours.", "Count from one to five.",
    "What is 2 + 2?", "Write a haiku about rain.", "Who wrote Hamlet?", "Define entropy.",
    "Say hello in Spanish.",
]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_llm(tiny_llama_dir):
    return LLM(str(tiny_llama_dir), max_num_batched_tokens=32, num_kv_blocks=64, block_size=4)


@pytest.fixture(scope="module")
def smol(smollm2_model):
    return LLM(engine=LLMEngine.from_loaded(smollm2_model, max_num_batched_tokens=256))


def test_output_fields_and_digests(tiny_llm):
    params = SamplingParams(
        max_tokens=5, temperature=0.8, seed=11, logprobs=3, return_logits=True, ignore_eos=True
    )
    out = tiny_llm.generate(["hello world"], params)[0]
    c = out.outputs[0]
    assert out.prompt == "hello world" and out.prompt_token_ids and out.finished
    assert out.fingerprint == tiny_llm.fingerprint
    assert len(c.token_ids) == 5 and c.finish_reason == "length" and c.seed == 11
    assert c.logits.shape == (5, tiny_llm.engine.vocab_size) and c.logits.dtype == np.float32
    for row, digest in zip(c.logits, c.logits_digests, strict=True):
        assert hashlib.sha256(row.astype("<f4").tobytes()).hexdigest() == digest
    assert len(c.logprobs) == 5 and all(
        t in lp for t, lp in zip(c.token_ids, c.logprobs, strict=True)
    )
    assert all(len(lp) >= 3 for lp in c.logprobs)


def test_seed_is_assigned_and_replays(tiny_llm):
    params = SamplingParams(max_tokens=6, temperature=1.0, ignore_eos=True)
    first = tiny_llm.generate(["replay me"], params)[0].outputs[0]
    assert isinstance(first.seed, int)
    replay = tiny_llm.generate(
        ["replay me"],
        SamplingParams(max_tokens=6, temperature=1.0, ignore_eos=True, seed=first.seed),
    )
    assert replay[0].outputs[0].token_ids == first.token_ids
    assert replay[0].outputs[0].logits_digests == first.logits_digests


def test_n_choices_and_token_id_prompts(tiny_llm):
    params = SamplingParams(n=3, max_tokens=4, temperature=1.0, seed=5, ignore_eos=True)
    out = tiny_llm.generate([[1, 2, 3, 4]], params)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2]
    assert out.outputs[0].seed == 5 and len({c.seed for c in out.outputs}) == 3


def test_streaming_text_only_grows(tiny_llm):
    texts = [
        o.outputs[0].text
        for o in tiny_llm.generate_stream(["stream"], SamplingParams(max_tokens=8, ignore_eos=True))
    ]
    assert len(texts) == 8
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:], strict=False))


@pytest.mark.parametrize(
    ("prompt", "params", "needle"),
    [
        ([], SamplingParams(), "empty"),
        ([10**6], SamplingParams(), "out of range"),
        ([1] * 10, SamplingParams(max_tokens=10**6), "context length"),
    ],
)
def test_bad_input_raises_clear_error_and_engine_survives(tiny_llm, prompt, params, needle):
    with pytest.raises(ValueError, match=needle):
        tiny_llm.generate([prompt], params)
    assert not tiny_llm.engine.has_unfinished_requests()
    assert tiny_llm.generate([[1, 2]], SamplingParams(max_tokens=2))[0].finished


def test_bad_sampling_params_name_the_field():
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=1.5)


@pytest.mark.slow
def test_smollm2_answers_paris(smol):
    out = smol.chat(
        [{"role": "user", "content": "What is the capital of France?"}],
        SamplingParams(max_tokens=24, temperature=0.0),
    )
    assert "Paris" in out[0].outputs[0].text


@pytest.mark.slow
def test_smollm2_32_prompts_batched_equal_alone(smol):
    """32 prompts in one generate call: each gets the same tokens and logits digests as alone."""
    prompts = [f"{q} (variant {i // len(QUESTIONS)})" for i, q in enumerate(QUESTIONS * 4)]
    params = SamplingParams(max_tokens=6, temperature=0.7, seed=2024)
    batched = smol.generate(prompts, params)
    for prompt, out in zip(prompts, batched, strict=True):
        alone = smol.generate([prompt], params)[0].outputs[0]
        assert out.outputs[0].token_ids == alone.token_ids, prompt
        assert out.outputs[0].logits_digests == alone.logits_digests, prompt
