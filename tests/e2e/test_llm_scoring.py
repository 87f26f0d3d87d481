"""`LLM.generate` with `prompt_logprobs` (vLLM's offline scoring), `logit_bias` and
`min_tokens`: prompt logprobs of batched prompts with n > 1 equal each prompt scored alone
(bitwise, float64 arrays compared with `same_bits`)."""

from __future__ import annotations

import numpy as np
import pytest

from samebits import LLM, SamplingParams
from samebits.bits import same_bits

PROMPTS = ["Scoring is log-likelihood.", "A", "The same bits, whatever the batch.", "x y z"]


@pytest.fixture(scope="module")
def llm(tiny_llama_dir):
    return LLM(str(tiny_llama_dir), max_num_batched_tokens=7, num_kv_blocks=64, block_size=4)


def _values(prompt_logprobs) -> np.ndarray:
    return np.array([v for lp in prompt_logprobs[1:] for v in lp.values()], dtype=np.float64)


def test_generate_prompt_logprobs_batched_equal_alone(llm):
    params = SamplingParams(max_tokens=2, n=2, seed=3, prompt_logprobs=4, temperature=0.7)
    batched = llm.generate(PROMPTS, params)
    for prompt, out in zip(PROMPTS, batched, strict=True):
        alone = llm.generate([prompt], SamplingParams(max_tokens=1, prompt_logprobs=4))[0]
        assert len(out.prompt_logprobs) == len(out.prompt_token_ids)
        assert out.prompt_logprobs[0] is None
        assert [list(lp) for lp in out.prompt_logprobs[1:]] == [
            list(lp) for lp in alone.prompt_logprobs[1:]
        ]
        assert same_bits(_values(out.prompt_logprobs), _values(alone.prompt_logprobs))
        for p, lp in enumerate(out.prompt_logprobs[1:], start=1):
            assert next(iter(lp)) == out.prompt_token_ids[p]  # the prompt token first
            assert len(lp) in (4, 5)
    assert llm.generate(PROMPTS[:1], SamplingParams(max_tokens=1))[0].prompt_logprobs is None


def test_generate_logit_bias_and_min_tokens(llm):
    eos = llm.tokenizer.eos_token_ids[0]
    biased = SamplingParams(max_tokens=6, temperature=0.0, logit_bias={eos: 100.0})
    assert llm.generate(PROMPTS[:1], biased)[0].outputs[0].token_ids == [eos]
    held = SamplingParams(max_tokens=6, temperature=0.0, logit_bias={eos: 100.0}, min_tokens=2)
    tokens = llm.generate(PROMPTS[:1], held)[0].outputs[0].token_ids
    assert len(tokens) == 3 and eos not in tokens[:2] and tokens[2] == eos
