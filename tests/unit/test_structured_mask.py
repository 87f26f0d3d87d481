"""Structured outputs, unit level: the spec's normalization and errors, the mask as a pure
function of (grammar, prefix) — a per-request matcher advanced token by token gives the same
mask bits as a fresh matcher fed the prefix, every time — and the sampler's use of it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from samebits.bits import same_bits
from samebits.sampling import SamplingParams, processed_logits, sample
from samebits.structured import StructuredOutputsParams
from samebits.structured.matcher import GrammarMatcher, GrammarTokenizer, grammar_step

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"enum": ["Paris", "Rome"]},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
DOCUMENT = '{"name": "Ada", "age": 36, "city": "Rome"}'


@pytest.fixture(scope="module")
def tiny_view():
    from samebits.model.tokenizer import Tokenizer
    from tiny_models import train_tiny_tokenizer

    tokenizer = Tokenizer(train_tiny_tokenizer(), eos_token_ids=[0])
    return tokenizer, GrammarTokenizer(tokenizer, 330)  # 10 padding ids past the tokenizer


@pytest.fixture(scope="module")
def smollm2_view(smollm2_gguf):
    from gguf import GGUFReader

    from samebits.model.gguf_loader import gguf_tokenizer

    tokenizer = gguf_tokenizer(GGUFReader(smollm2_gguf), smollm2_gguf)
    return tokenizer, GrammarTokenizer(tokenizer, tokenizer.vocab_size)


def test_spec_normalizes_and_round_trips():
    from_dict = StructuredOutputsParams(json=SCHEMA)
    from_text = StructuredOutputsParams(json=json.dumps(SCHEMA, indent=2))
    assert from_dict == from_text and hash(from_dict) == hash(from_text)
    assert list(json.loads(from_dict.json)["properties"]) == ["name", "age", "city"]  # order kept
    assert StructuredOutputsParams.from_dict(from_dict.to_dict()) == from_dict
    params = SamplingParams(structured_outputs={"choice": ["a", "b"]}, seed=1)
    assert params.structured_outputs == StructuredOutputsParams(choice=("a", "b"))
    assert SamplingParams.from_dict(json.loads(json.dumps(params.to_dict()))) == params
    assert ("structured_outputs", params.structured_outputs) in params.sampler_state()
    assert "structured_outputs" not in dict(SamplingParams(seed=1).sampler_state())


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"regex": "a(b"}, "structured_outputs.regex is invalid: "),
        ({"json": {"type": "nope"}}, "structured_outputs.json is invalid: "),
        ({"json": "{oops"}, "structured_outputs.json is not valid JSON"),
        ({"grammar": "start: missing_rule"}, "structured_outputs.grammar is invalid: "),
        ({"grammar": "root ::= undefined"}, "structured_outputs.grammar: "),
        ({"choice": []}, "structured_outputs.choice must be a non-empty list"),
        ({"regex": "a", "choice": ["a"]}, "needs exactly one of"),
        ({}, "needs exactly one of"),
        ({"json_object": True, "disable_fallback": True}, "unknown field(s) ['disable_fallback']"),
    ],
)
def test_bad_specs_raise_a_clear_value_error(fields, message):
    with pytest.raises(ValueError) as info:
        SamplingParams(structured_outputs=fields)
    assert message in str(info.value)


def _walk(view, spec, ids):
    """Masks from one matcher advanced along `ids`, checked against fresh matchers."""
    matcher = GrammarMatcher(view, spec)
    for i, token in enumerate(ids):
        step = grammar_step(view, spec, ids[:i])
        mask = matcher.allowed()
        assert same_bits(mask, step.allowed) and same_bits(mask, matcher.allowed()), i
        assert mask[token] and not step.terminated, i
        matcher.accept(token)
    return matcher


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"json": SCHEMA}, DOCUMENT),
        ({"json_object": True}, '{"x": [1, 2.5, {"y": null}]}'),
        ({"regex": "[a-z]+-[0-9]{2}"}, "fox-42"),
        ({"choice": ["yes", "no way"]}, "no way"),
        ({"grammar": 'root ::= "(" [0-9]+ ")"'}, "(2024)"),
    ],
)
def test_mask_is_a_pure_function_of_grammar_and_prefix(tiny_view, fields, text):
    tokenizer, view = tiny_view
    spec = StructuredOutputsParams(**fields)
    ids = tokenizer.encode(text)
    matcher = _walk(view, spec, ids)
    assert matcher.num_accepted == len(ids)
    end = grammar_step(view, spec, ids)
    assert not end.allowed[320:].any()  # ids past the tokenizer are never allowed
    if fields.get("choice") or fields.get("json"):
        assert matcher.terminated and end.terminated


def test_mask_on_smollm2_is_pure(smollm2_view):
    tokenizer, view = smollm2_view
    spec = StructuredOutputsParams(json=SCHEMA, disable_any_whitespace=True)
    ids = tokenizer.encode(json.dumps(json.loads(DOCUMENT), separators=(",", ":")))
    assert _walk(view, spec, ids).terminated
    first = grammar_step(view, spec, [])
    assert first.allowed.shape == (49152,) and int(first.allowed.sum()) < 100


def test_a_token_outside_the_grammar_is_refused(tiny_view):
    tokenizer, view = tiny_view
    matcher = GrammarMatcher(view, StructuredOutputsParams(regex="[0-9]+"))
    with pytest.raises(ValueError, match="does not match the grammar"):
        matcher.accept(tokenizer.encode("x")[0])


def test_sampler_never_draws_a_masked_id_and_a_full_mask_changes_nothing():
    rng = np.random.default_rng(3)
    row = rng.standard_normal(64).astype(np.float32)
    allowed = np.zeros(64, dtype=bool)
    allowed[[5, 17, 40]] = True
    for seed in range(20):
        params = SamplingParams(temperature=1.5, seed=seed)
        assert sample(row, params, seed, 0, [1], [], (), allowed) in (5, 17, 40)
        free = processed_logits(row, params, 0, [1], [])
        full = processed_logits(row, params, 0, [1], [], (), np.ones(64, dtype=bool))
        assert same_bits(free, full)
    with pytest.raises(ValueError, match="no finite entry"):
        processed_logits(row, SamplingParams(), 0, [1], [], (), np.zeros(64, dtype=bool))
    with pytest.raises(ValueError, match="bool numpy array"):
        processed_logits(row, SamplingParams(), 0, [1], [], (), allowed.astype(np.int8))
