"""A checkpoint whose embedding is padded past its tokenizer (config `vocab_size` larger than
the tokenizer's): an id past the tokenizer that gets sampled decodes to "" and stays in the
output ids; the request does not fail (vLLM's rule). Issue 29, part 3."""

from __future__ import annotations

import pytest

from samebits import LLM, SamplingParams
from samebits.outputs import RequestOutputKind
from tiny_models import TINY_VOCAB, make_tiny_checkpoint

PADDED = TINY_VOCAB + 64  # 64 embedding rows the tokenizer has no text for
PAST = TINY_VOCAB + 17


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    path = make_tiny_checkpoint(tmp_path_factory.mktemp("padded"), "llama", vocab_size=PADDED)
    return LLM(str(path), num_kv_blocks=64, block_size=4)


def test_tokenizer_is_smaller_than_the_model(llm):
    assert llm.tokenizer.vocab_size == TINY_VOCAB
    assert llm.engine.deployment.config.vocab_size == PADDED


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_sampled_id_past_the_tokenizer_decodes_to_empty_text(llm, temperature):
    params = SamplingParams(
        max_tokens=4, temperature=temperature, seed=5, logit_bias={PAST: 100.0}, logprobs=2
    )
    out = llm.generate(["Hello there"], params)[0].outputs[0]
    assert out.token_ids == [PAST] * 4
    assert out.text == ""
    assert out.finish_reason == "length"
    assert len(out.logits_digests) == 4
    assert all(PAST in lp for lp in out.logprobs)


def test_ids_past_the_tokenizer_between_text_tokens(llm):
    """The text around an id past the tokenizer is what the known ids alone decode to."""
    plain = llm.generate(["Hello"], SamplingParams(max_tokens=3, temperature=0.0))[0].outputs[0]
    ids = [plain.token_ids[0], PAST, *plain.token_ids[1:]]
    assert llm.tokenizer.decode(ids) == llm.tokenizer.decode(plain.token_ids)
    assert llm.tokenizer.token_to_str(PAST) == ""


def test_a_negative_id_is_still_refused(llm):
    with pytest.raises(ValueError, match="negative"):
        llm.tokenizer.decode([3, -1])


def test_stream_with_an_id_past_the_tokenizer(llm):
    params = SamplingParams(max_tokens=3, temperature=0.0, logit_bias={PAST: 100.0})
    deltas = list(llm.generate_stream(["Hello there"], params, RequestOutputKind.DELTA))
    assert [t for d in deltas for t in d.outputs[0].token_ids] == [PAST] * 3
    assert "".join(d.outputs[0].text for d in deltas) == ""
    assert deltas[-1].finished
