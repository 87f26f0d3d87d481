"""The official `openai` client against the server (fake engine): all four call shapes, and
64 concurrent requests equal to the same requests sent one by one."""

from __future__ import annotations

import openai
from openai_workload import make_requests, run_workload


def client_for(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def test_openai_client_completion_and_chat(fake_server):
    client = client_for(fake_server)
    assert [m.id for m in client.models.list().data] == ["fake-model"]
    completion = client.completions.create(model="fake-model", prompt="hello", max_tokens=5, seed=3)
    assert completion.system_fingerprint == fake_server.engine.fingerprint
    assert completion.choices[0].model_extra["samebits"]["seed"] == 3
    chat = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=5, seed=3
    )
    assert chat.choices[0].message.role == "assistant"
    assert (
        len(chat.choices[0].model_extra["samebits"]["logits_digests"])
        == chat.usage.completion_tokens
    )


def test_openai_client_streaming(fake_server):
    client = client_for(fake_server)
    chunks = list(client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=6, seed=4,
        stream=True, extra_body={"ignore_eos": True},
    ))  # fmt: skip
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    whole = client.chat.completions.create(
        model="fake-model", messages=[{"role": "user", "content": "hi"}], max_tokens=6, seed=4,
        extra_body={"ignore_eos": True},
    )  # fmt: skip
    assert text == whole.choices[0].message.content
    assert chunks[-1].choices[0].finish_reason == "length"


def test_openai_client_error_is_raised_as_bad_request(fake_server):
    client = client_for(fake_server)
    try:
        client.completions.create(model="fake-model", prompt="a", temperature=-1)
    except openai.BadRequestError as exc:
        assert exc.status_code == 400
        assert "temperature" in str(exc)
    else:
        raise AssertionError("temperature=-1 was accepted")


def test_64_concurrent_requests_equal_sequential(fake_server):
    requests = make_requests(64)
    steps_before = len(fake_server.engine.batch_sizes)
    concurrent = run_workload(fake_server.url, "fake-model", requests, concurrent=True)
    sequential = run_workload(fake_server.url, "fake-model", requests, concurrent=False)
    assert concurrent == sequential
    assert all(r["token_ids"] for r in concurrent)
    during = fake_server.engine.batch_sizes[steps_before:]
    assert max(during) > 1  # the engine really batched them
