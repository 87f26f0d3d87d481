"""Structured outputs through the server with the official `openai` client (tiny random
Llama): `response_format` json_schema / json_object on chat and completions, vLLM's
`guided_*` extras and `structured_outputs`, streaming and n > 1; every output is parsed and
checked against its schema / choices / regex; bad grammars are 400s in the OpenAI error
schema and the server keeps serving."""

from __future__ import annotations

import json
import re

import openai
import pytest
from harness import RunningServer

from samebits.engine.engine import LLMEngine
from samebits.server.app import build_app
from samebits.server.config import ServerConfig

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 4},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
    "required": ["name", "age", "tags"],
    "additionalProperties": False,
}
JSON_SCHEMA_FORMAT = {
    "type": "json_schema",
    "json_schema": {"name": "person", "schema": SCHEMA, "strict": True},
}
COMPACT = {"guided_whitespace_pattern": ""}
MESSAGES = [{"role": "user", "content": "Give me a person as JSON."}]


def matches_schema(value: object) -> bool:
    """SCHEMA checked by hand (jsonschema is not a dependency)."""
    if not isinstance(value, dict) or set(value) != {"name", "age", "tags"}:
        return False
    name, age, tags = value["name"], value["age"], value["tags"]
    return (
        isinstance(name, str)
        and len(name) <= 4
        and type(age) is int
        and 0 <= age <= 99
        and isinstance(tags, list)
        and len(tags) <= 2
        and all(t in ("a", "b") for t in tags)
    )


@pytest.fixture(scope="module")
def server(tiny_llama_dir):
    engine = LLMEngine.from_args(str(tiny_llama_dir), max_num_seqs=8)
    with RunningServer(build_app(engine, ServerConfig(model_names=("tiny",)))) as running:
        running.engine = engine
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def test_chat_json_schema_validates(client):
    for seed in (1, 2, 3):
        chat = client.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=120, seed=seed, temperature=1.0,
            response_format=JSON_SCHEMA_FORMAT, extra_body=COMPACT,
        )  # fmt: skip
        choice = chat.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        assert matches_schema(json.loads(choice.message.content)), choice.message.content


def test_completions_json_schema_streamed_with_n2_equals_unstreamed(client):
    body = dict(
        model="tiny", prompt="Person:", max_tokens=120, seed=9, n=2,
        extra_body={"response_format": JSON_SCHEMA_FORMAT, **COMPACT},
    )  # fmt: skip
    whole = client.completions.create(**body)
    texts, finish = {0: "", 1: ""}, {}
    for chunk in client.completions.create(**body, stream=True):
        for choice in chunk.choices:
            texts[choice.index] += choice.text
            finish[choice.index] = choice.finish_reason or finish.get(choice.index)
    for choice in whole.choices:
        assert texts[choice.index] == choice.text and finish[choice.index] == "stop"
        assert matches_schema(json.loads(choice.text)), choice.text


def test_json_object_gives_an_object(client, server):
    close = server.engine.tokenizer.encode("}")
    assert len(close) == 1  # pushed up so that the random model closes the object
    completion = client.completions.create(
        model="tiny", prompt="{", max_tokens=30, seed=4, logit_bias={str(close[0]): 30},
        extra_body={"response_format": {"type": "json_object"}},
    )  # fmt: skip
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and isinstance(json.loads(choice.text), dict)


@pytest.mark.parametrize(
    ("extra", "check"),
    [
        ({"guided_choice": ["red", "green", "blue"]}, lambda t: t in ("red", "green", "blue")),
        ({"guided_regex": "[a-z]{2,4}-[0-9]{2}"}, lambda t: re.fullmatch("[a-z]{2,4}-[0-9]{2}", t)),
        (
            {"guided_grammar": 'root ::= "(" [0-9] ("," [0-9])? ")"'},
            lambda t: re.fullmatch(r"\([0-9](,[0-9])?\)", t),
        ),
        ({"structured_outputs": {"choice": ["x", "y"]}}, lambda t: t in ("x", "y")),
        ({"guided_json": SCHEMA, **COMPACT}, lambda t: matches_schema(json.loads(t))),
    ],
)
def test_vllm_guided_extras_stream_with_n3(client, extra, check):
    chunks = client.chat.completions.create(
        model="tiny", messages=MESSAGES, max_tokens=120, seed=7, n=3, stream=True,
        extra_body=extra,
    )  # fmt: skip
    texts, finish = {}, {}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] = texts.get(choice.index, "") + (choice.delta.content or "")
            finish[choice.index] = choice.finish_reason or finish.get(choice.index)
    assert sorted(texts) == [0, 1, 2]
    for index, text in texts.items():
        assert finish[index] == "stop" and check(text), (index, text)


@pytest.mark.parametrize(
    ("extra", "param", "fragment"),
    [
        ({"response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"type": "nonsense"}}}}, "response_format", "is invalid"),
        ({"response_format": {"type": "json_schema"}}, "response_format", "needs 'json_schema'"),
        ({"response_format": {"type": "yaml"}}, "response_format", "must be one of"),
        ({"guided_regex": "(unclosed"}, "guided_regex", "unclosed group"),
        ({"guided_grammar": "start: nowhere"}, "guided_grammar", "unknown name"),
        ({"guided_choice": []}, "guided_choice", "non-empty list"),
        ({"guided_regex": "a", "guided_choice": ["a"]}, "guided_choice", "only one"),
        ({"structured_outputs": {"regex": "a", "disable_fallback": True}}, "structured_outputs",
         "unknown field(s)"),
        ({"guided_regex": "a", "guided_decoding_backend": "xgrammar"}, "guided_decoding_backend",
         "not available"),
    ],
)  # fmt: skip
def test_bad_grammars_are_400s_and_lose_nothing(client, extra, param, fragment):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="tiny", messages=MESSAGES, max_tokens=5, extra_body=extra
        )
    error = info.value.body
    assert info.value.status_code == 400 and error["type"] == "invalid_request_error"
    assert error["param"] == param and fragment in error["message"], error
    after = client.chat.completions.create(model="tiny", messages=MESSAGES, max_tokens=3, seed=1)
    assert after.choices[0].finish_reason in ("stop", "length")
