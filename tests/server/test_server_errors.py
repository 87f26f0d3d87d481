"""Bad input gets a 4xx in the OpenAI error schema naming the problem; the server stays up."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from fake_engine import BOOM, FakeEngine
from harness import RunningServer

from samebits.server.app import build_app
from samebits.server.config import ServerConfig

LONG = "x" * 300  # 301 tokens with BOS: beyond the fake's context of 256

JSON_CASES = [
    ("/v1/completions", {"prompt": ""}, 400, "prompt", "empty"),
    ("/v1/completions", {"prompt": []}, 400, "prompt", "empty"),
    ("/v1/completions", {"prompt": LONG}, 400, "prompt", "context length"),
    (
        "/v1/completions",
        {"prompt": "x" * 200, "max_tokens": 100},
        400,
        "max_tokens",
        "exceeds the context",
    ),
    ("/v1/completions", {"prompt": [1, 999]}, 400, "prompt", "out of range"),
    ("/v1/completions", {"prompt": [-1, 2]}, 400, "prompt.0", "greater than or equal to 0"),
    ("/v1/completions", {"prompt": "a", "temperature": -0.5}, 400, "temperature", "temperature"),
    ("/v1/completions", {"prompt": "a", "top_p": 0}, 400, "top_p", "top_p"),
    ("/v1/completions", {"prompt": "a", "top_p": 1.5}, 400, "top_p", "top_p"),
    ("/v1/completions", {"prompt": "a", "n": 5}, 400, "n", "limit is 4"),
    ("/v1/completions", {"prompt": "a", "n": 0}, 400, "n", "'n'"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 0}, 400, "max_tokens", "max_tokens"),
    ("/v1/completions", {"prompt": "a", "max_tokens": 1.5}, 400, "max_tokens", "integer"),
    ("/v1/completions", {"prompt": "a", "temperature": "hot"}, 400, "temperature", "number"),
    ("/v1/completions", {"prompt": "a", "stream": "yes"}, 400, "stream", "boolean"),
    ("/v1/completions", {"prompt": "a", "n": True}, 400, "n", "integer"),
    ("/v1/completions", {"prompt": 5}, 400, "prompt", "prompt"),
    ("/v1/completions", {"prompt": "a", "seed": -1}, 400, "seed", "seed"),
    ("/v1/completions", {"prompt": "a", "seed": 2**64}, 400, "seed", "seed"),
    ("/v1/completions", {"prompt": "a", "stop": ""}, 400, "stop", "non-empty"),
    ("/v1/completions", {"prompt": "a", "logit_bias": {"999": 1}}, 400, "logit_bias", "range"),
    ("/v1/completions", {"prompt": "a", "logit_bias": {"5": 200}}, 400, "logit_bias", "-100"),
    ("/v1/completions", {"prompt": "a", "suffix": "z"}, 400, "suffix", "not supported"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "logit_bias": {"x": 1}},
        400,
        "logit_bias",
        "token ids",
    ),
    ("/v1/completions", {"prompt": "a", "model": "gpt-9"}, 404, "model", "does not exist"),
    ("/v1/completions", {"max_tokens": 3}, 400, "prompt", "'prompt' is required"),
    ("/v1/chat/completions", {"messages": []}, 400, "messages", "messages"),
    ("/v1/chat/completions", {"max_tokens": 2}, 400, "messages", "'messages' is required"),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "wizard", "content": "x"}]},
        400,
        "messages.0.role",
        "role",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": LONG}]},
        400,
        "prompt",
        "context length",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "top_logprobs": 30, "logprobs": True},
        400,
        "top_logprobs",
        "top_logprobs",
    ),
    (
        "/v1/chat/completions",
        {"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]},
        400,
        "tools",
        "tools[0].function must be an object",
    ),
]

RAW_CASES = [
    (b'{"prompt": ', 400, "not valid JSON"),
    (b'{"prompt": "a", "temperature": NaN}', 400, "NaN"),
    (b'{"prompt": "\xff\xfe"}', 400, "UTF-8"),
    (b"[1, 2, 3]", 400, "JSON object"),
    (b"", 400, "empty"),
    (b'{"prompt": "a\\ud800b"}', 400, "surrogate"),
    (b'{"prompt": "' + b"a" * 70_000 + b'"}', 413, "larger than the limit"),
]


def check_error(response: httpx.Response, status: int, fragment: str) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert fragment.lower() in error["message"].lower(), error["message"]
    return error


@pytest.mark.parametrize(("path", "body", "status", "param", "fragment"), JSON_CASES)
def test_bad_json_fields(fake_server, path, body, status, param, fragment):
    response = httpx.post(fake_server.url + path, json=body, timeout=30)
    error = check_error(response, status, fragment)
    assert error["param"] == param


@pytest.mark.parametrize(("content", "status", "fragment"), RAW_CASES)
def test_bad_bodies(fake_server, content, status, fragment):
    response = httpx.post(
        fake_server.url + "/v1/completions", content=content,
        headers={"content-type": "application/json"}, timeout=30,
    )  # fmt: skip
    check_error(response, status, fragment)


def test_server_still_serves_after_bad_input(fake_server):
    for path, body, *_ in JSON_CASES[:5]:
        httpx.post(fake_server.url + path, json=body, timeout=30)
    ok = httpx.post(
        fake_server.url + "/v1/completions", json={"prompt": "fine", "max_tokens": 2}, timeout=30
    )
    assert ok.status_code == 200
    assert httpx.get(fake_server.url + "/health").status_code == 200


def test_api_key_required_when_set():
    config = ServerConfig(model_names=("fake-model",), api_key="s3cret")
    with RunningServer(build_app(FakeEngine(), config)) as server:
        body = {"prompt": "a", "max_tokens": 2}
        missing = httpx.post(server.url + "/v1/completions", json=body)
        check_error(missing, 401, "API key")
        wrong = httpx.post(
            server.url + "/v1/completions", json=body, headers={"Authorization": "Bearer nope"}
        )
        check_error(wrong, 401, "API key")
        assert httpx.get(server.url + "/v1/models").status_code == 401
        assert httpx.get(server.url + "/metrics").status_code == 401
        assert httpx.get(server.url + "/health").status_code == 200
        good = httpx.post(
            server.url + "/v1/completions", json=body, headers={"Authorization": "Bearer s3cret"}
        )
        assert good.status_code == 200


def test_failure_in_one_request_fails_only_that_request():
    engine = FakeEngine(fail_token=0, step_delay=0.002)
    config = ServerConfig(model_names=("fake-model",))
    with RunningServer(build_app(engine, config)) as server:

        async def run() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
                bodies = [
                    {"prompt": f"ok {i}", "max_tokens": 20, "ignore_eos": True} for i in range(6)
                ]
                bodies.insert(3, {"prompt": "bad \x00 prompt", "max_tokens": 20})
                bodies.insert(5, {"prompt": BOOM, "max_tokens": 20})
                return await asyncio.gather(
                    *(client.post("/v1/completions", json=b) for b in bodies)
                )

        responses = asyncio.run(run())
        statuses = [r.status_code for r in responses]
        assert statuses == [200, 200, 200, 500, 200, 500, 200, 200]
        check_error(responses[3], 500, "injected failure")
        check_error(responses[5], 500, "injected tokenizer failure")
        assert all(
            len(r.json()["choices"][0]["samebits"]["token_ids"]) == 20
            for r in responses
            if r.status_code == 200
        )
        assert httpx.get(server.url + "/health").status_code == 200
        assert not engine.has_unfinished_requests()


class BrokenLoopEngine(FakeEngine):
    """`has_unfinished_requests` raises once a request came in: the loop thread dies."""

    def has_unfinished_requests(self) -> bool:
        if self.requests:
            raise RuntimeError("scheduler state corrupted")
        return False


def test_dead_engine_loop_fails_requests_and_health():
    with RunningServer(
        build_app(BrokenLoopEngine(), ServerConfig(model_names=("fake-model",)))
    ) as server:
        first = httpx.post(
            server.url + "/v1/completions", json={"prompt": "a", "max_tokens": 2}, timeout=30
        )
        check_error(first, 500, "engine loop stopped")
        assert httpx.get(server.url + "/health").status_code == 503
        later = httpx.post(
            server.url + "/v1/completions", json={"prompt": "a", "max_tokens": 2}, timeout=30
        )
        check_error(later, 503, "not running")
