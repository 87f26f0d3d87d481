"""The OpenAI-compatible endpoints over a fake engine: shapes, extension fields, streaming."""

from __future__ import annotations

import json

import httpx
import pytest

from samebits.audit import read_log
from samebits.sampling import derive_seed


def post(server, path: str, body: dict, **kw) -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=30, **kw)


def sse_events(response: httpx.Response) -> list:
    events = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            events.append(data if data == "[DONE]" else json.loads(data))
    return events


def stream(server, path: str, body: dict) -> list:
    with httpx.stream("POST", server.url + path, json=body, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return sse_events(response)


def test_health_and_models(fake_server):
    health = httpx.get(fake_server.url + "/health").json()
    assert health["status"] == "ok"
    models = httpx.get(fake_server.url + "/v1/models").json()
    assert [m["id"] for m in models["data"]] == ["fake-model"]
    assert models["data"][0]["samebits"]["fingerprint"] == fake_server.engine.fingerprint


def test_completion_carries_fingerprint_seed_and_digests(fake_server):
    body = post(
        fake_server,
        "/v1/completions",
        {"model": "fake-model", "prompt": "abc", "max_tokens": 6, "seed": 7, "ignore_eos": True},
    ).json()
    assert body["object"] == "text_completion"
    assert body["system_fingerprint"] == fake_server.engine.fingerprint
    assert body["samebits"]["seed"] == 7
    choice = body["choices"][0]
    ext = choice["samebits"]
    assert ext["seed"] == 7
    assert len(ext["token_ids"]) == 6 == len(ext["logits_digests"])
    assert ext["prompt_token_ids"] == fake_server.engine.tokenizer.encode(
        "abc", add_special_tokens=True
    )
    assert choice["text"] == fake_server.engine.tokenizer.decode(ext["token_ids"])
    assert choice["finish_reason"] == "length"
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 6, "total_tokens": 10}


def test_request_without_seed_reports_one_that_replays(fake_server):
    first = post(
        fake_server,
        "/v1/completions",
        {"prompt": "xyz", "max_tokens": 8, "ignore_eos": True, "temperature": 0.8},
    ).json()
    seed = first["samebits"]["seed"]
    again = post(
        fake_server,
        "/v1/completions",
        {"prompt": "xyz", "max_tokens": 8, "ignore_eos": True, "temperature": 0.8, "seed": seed},
    ).json()
    assert (
        again["choices"][0]["samebits"]["token_ids"] == first["choices"][0]["samebits"]["token_ids"]
    )
    assert (
        again["choices"][0]["samebits"]["logits_digests"]
        == first["choices"][0]["samebits"]["logits_digests"]
    )


def test_n_choices_use_derived_seeds(fake_server):
    body = post(
        fake_server,
        "/v1/completions",
        {"prompt": "q", "n": 3, "max_tokens": 5, "seed": 11, "ignore_eos": True},
    ).json()
    seeds = [c["samebits"]["seed"] for c in body["choices"]]
    assert seeds == [derive_seed(11, i) for i in range(3)]
    single = post(
        fake_server,
        "/v1/completions",
        {"prompt": "q", "max_tokens": 5, "seed": 11, "ignore_eos": True},
    ).json()
    assert (
        body["choices"][0]["samebits"]["token_ids"] == single["choices"][0]["samebits"]["token_ids"]
    )
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]


def test_batched_prompts_and_token_id_prompts(fake_server):
    ids = fake_server.engine.tokenizer.encode("two", add_special_tokens=True)
    body = post(
        fake_server,
        "/v1/completions",
        {"prompt": ["one", "two"], "n": 2, "max_tokens": 3, "seed": 5},
    ).json()
    by_ids = post(
        fake_server, "/v1/completions", {"prompt": ids, "max_tokens": 3, "seed": 5}
    ).json()
    assert [c["index"] for c in body["choices"]] == [0, 1, 2, 3]
    assert (
        body["choices"][2]["samebits"]["token_ids"] == by_ids["choices"][0]["samebits"]["token_ids"]
    )


def test_stream_concatenates_to_the_non_streamed_result(fake_server):
    request = {
        "prompt": "stream me",
        "max_tokens": 12,
        "seed": 3,
        "ignore_eos": True,
        "logprobs": 2,
    }
    whole = post(fake_server, "/v1/completions", request).json()["choices"][0]
    events = stream(
        fake_server,
        "/v1/completions",
        {**request, "stream": True, "stream_options": {"include_usage": True}},
    )
    assert events[-1] == "[DONE]"
    chunks = [e for e in events[:-1] if e["choices"]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == whole["text"]
    tokens = [t for c in chunks for t in c["choices"][0]["samebits"]["token_ids"]]
    digests = [d for c in chunks for d in c["choices"][0]["samebits"]["logits_digests"]]
    assert tokens == whole["samebits"]["token_ids"]
    assert digests == whole["samebits"]["logits_digests"]
    streamed_lps = [lp for c in chunks for lp in c["choices"][0]["logprobs"]["token_logprobs"]]
    assert streamed_lps == whole["logprobs"]["token_logprobs"]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"][0]["samebits"]["audit"]["seq"] >= 0
    assert events[-2]["usage"]["completion_tokens"] == 12


def test_chat_stream_matches_chat(fake_server):
    request = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 10,
        "seed": 9,
        "ignore_eos": True,
    }
    whole = post(fake_server, "/v1/chat/completions", request).json()
    assert whole["object"] == "chat.completion"
    message = whole["choices"][0]["message"]
    events = stream(fake_server, "/v1/chat/completions", {**request, "stream": True})
    chunks = events[:-1]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert message == {"role": "assistant", "content": text}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


def test_logprobs_formats(fake_server):
    completion = post(
        fake_server,
        "/v1/completions",
        {"prompt": "lp", "max_tokens": 4, "seed": 1, "logprobs": 3, "ignore_eos": True},
    ).json()
    lp = completion["choices"][0]["logprobs"]
    assert len(lp["tokens"]) == 4 == len(lp["token_logprobs"]) == len(lp["top_logprobs"])
    assert all(len(top) <= 3 for top in lp["top_logprobs"])
    chat = post(
        fake_server,
        "/v1/chat/completions",
        {
            "messages": [{"role": "user", "content": "x"}],
            "max_tokens": 4,
            "seed": 1,
            "logprobs": True,
            "top_logprobs": 2,
            "ignore_eos": True,
        },
    ).json()
    content = chat["choices"][0]["logprobs"]["content"]
    assert len(content) == 4
    for entry in content:
        values = [t["logprob"] for t in entry["top_logprobs"]]
        assert len(values) == 2 and values == sorted(values, reverse=True)
        assert bytes(entry["bytes"]).decode() == entry["token"]


def test_stop_string_truncates(fake_server):
    probe = post(
        fake_server,
        "/v1/completions",
        {"prompt": "s", "max_tokens": 10, "seed": 2, "ignore_eos": True},
    ).json()
    text = probe["choices"][0]["text"]
    stop = text[4:6]
    cut = post(
        fake_server,
        "/v1/completions",
        {"prompt": "s", "max_tokens": 10, "seed": 2, "ignore_eos": True, "stop": stop},
    ).json()
    assert cut["choices"][0]["finish_reason"] == "stop"
    assert cut["choices"][0]["text"] == text[: text.index(stop)]


def test_every_choice_is_in_the_audit_log(fake_server):
    body = post(
        fake_server,
        "/v1/completions",
        {"prompt": "audit me", "n": 2, "max_tokens": 3, "seed": 4, "user": "alice"},
    ).json()
    entries = {e.entry["entry_hash"]: e.entry for e in read_log(fake_server.log_path).entries}
    for choice in body["choices"]:
        entry = entries[choice["samebits"]["audit"]["entry_hash"]]
        assert entry["user"] == "alice"
        assert entry["output_token_ids"] == choice["samebits"]["token_ids"]
        assert entry["logits_digests"] == choice["samebits"]["logits_digests"]
        assert entry["sampling_params"]["seed"] == choice["samebits"]["seed"]
        assert entry["fingerprint"] == fake_server.engine.fingerprint
    head = httpx.get(fake_server.url + "/v1/audit/head").json()
    assert head["entry_hash"] == read_log(fake_server.log_path).entries[-1].entry["entry_hash"]


def test_metrics_exposition(fake_server):
    post(fake_server, "/v1/completions", {"prompt": "m", "max_tokens": 2})
    text = httpx.get(fake_server.url + "/metrics").text
    for name in (
        "samebits_requests_total",
        "samebits_generation_tokens_total",
        "samebits_batch_size_bucket",
        "samebits_engine_num_waiting",
        "samebits_running_requests",
    ):
        assert name in text
    assert 'samebits_requests_total{endpoint="/v1/completions",status="200"}' in text


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_unknown_route_and_method_use_error_schema(fake_server, path):
    missing = httpx.get(fake_server.url + "/v1/nothing-here")
    assert missing.status_code == 404 and "error" in missing.json()
    wrong_method = httpx.get(fake_server.url + path)
    assert wrong_method.status_code == 405 and "error" in wrong_method.json()
