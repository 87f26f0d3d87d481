"""LLMEngine.add_request takes text or token ids like vLLM (issue 10, #8): a string, a list of
ids, `{"prompt_token_ids": [...]}` or `{"prompt": "..."}`; anything else is a TypeError."""

from __future__ import annotations

import numpy as np
import pytest

from samebits.deployment import build_deployment
from samebits.engine.engine import LLMEngine
from samebits.model import load_model
from samebits.sampling import SamplingParams
from samebits.testing.drive import run_until_done

PARAMS = SamplingParams(max_tokens=4, ignore_eos=True, seed=5)


@pytest.fixture(scope="module")
def deployment(tiny_llama_dir):
    return build_deployment(load_model(tiny_llama_dir), "invariant")


@pytest.fixture
def engine(deployment):
    return LLMEngine.from_deployment(deployment)


def test_string_prompt_is_tokenized_and_recorded(engine):
    text = "Hello world!"
    ids = engine.tokenizer.encode(text, add_special_tokens=True)
    engine.add_request("text", text, PARAMS)
    engine.add_request("ids", ids, PARAMS)
    engine.add_request("kw", prompt_token_ids=text, params=PARAMS)
    out = run_until_done(engine)
    assert out["text"].prompt == text and out["text"].prompt_token_ids == ids
    assert out["kw"].prompt == text and out["kw"].prompt_token_ids == ids
    assert out["ids"].prompt is None
    assert out["text"].outputs[0].token_ids == out["ids"].outputs[0].token_ids
    assert out["text"].outputs[0].logits_digests == out["ids"].outputs[0].logits_digests


def test_dict_prompts(engine):
    text = "to be or not to be"
    ids = engine.tokenizer.encode(text, add_special_tokens=True)
    engine.add_request("tokens", {"prompt_token_ids": ids}, PARAMS)
    engine.add_request("text", {"prompt": text}, PARAMS)
    engine.add_request("both", {"prompt_token_ids": [1, 2, 3], "prompt": "label"}, PARAMS)
    out = run_until_done(engine)
    assert out["tokens"].prompt_token_ids == ids and out["tokens"].prompt is None
    assert out["text"].prompt_token_ids == ids and out["text"].prompt == text
    assert out["both"].prompt_token_ids == [1, 2, 3] and out["both"].prompt == "label"


def test_positional_signature_and_prompt_keyword_still_work(engine):
    engine.add_request("a", (1, 2, 3), PARAMS, "shown text")
    out = run_until_done(engine)["a"]
    assert out.prompt_token_ids == [1, 2, 3] and out.prompt == "shown text"


@pytest.mark.parametrize(
    ("prompt", "needle"),
    [
        (42, "int"),
        (None, "NoneType"),
        (b"\x01\x02", "bytes"),
        (np.array([1, 2, 3]), "ndarray"),
        ({"text": "hi"}, "text"),
        ({"prompt_token_ids": "hi"}, "prompt_token_ids"),
        ({"prompt": [1, 2]}, "prompt"),
        ([1, "w"], "str"),
        ([1, 2.0], "float"),
        ([1, True], "bool"),
    ],
)
def test_anything_else_is_a_clear_type_error(engine, prompt, needle):
    with pytest.raises(TypeError, match=needle):
        engine.add_request("x", prompt, PARAMS)
    assert not engine.has_unfinished_requests()


def test_value_errors_stay_value_errors(engine):
    with pytest.raises(ValueError, match="empty"):
        engine.add_request("x", [], PARAMS)
    with pytest.raises(ValueError, match="out of range"):
        engine.add_request("x", [engine.vocab_size], PARAMS)
    with pytest.raises(ValueError, match="out of range"):
        engine.add_request("x", {"prompt_token_ids": [-1]}, PARAMS)


def test_a_prompt_beyond_the_kv_cache_is_refused_not_queued(deployment):
    """A prompt within the context (256) but beyond the KV cache (4 blocks of 16 slots) could
    never be admitted: add_request refuses it, and the engine stays usable."""
    engine = LLMEngine.from_deployment(deployment, num_kv_blocks=4, block_size=16)
    with pytest.raises(ValueError, match="needs 7 KV blocks, the cache has 4"):
        engine.add_request("long", list(range(3, 103)), PARAMS)
    assert not engine.has_unfinished_requests()
    engine.add_request("long", list(range(3, 53)), PARAMS)  # the id is free again
    assert run_until_done(engine)["long"].finished
