"""A client that goes away mid-request gets its engine request aborted and logged."""

from __future__ import annotations

import time

import httpx
import pytest
from fake_engine import FakeEngine
from harness import RunningServer

from samebits.audit import read_log
from samebits.audit.writer import AuditLogWriter
from samebits.server.app import build_app
from samebits.server.config import ServerConfig


def wait_for(predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.01)


@pytest.fixture
def slow_server(tmp_path):
    engine = FakeEngine(step_delay=0.01)
    writer = AuditLogWriter(tmp_path / "audit.jsonl")
    with RunningServer(
        build_app(engine, ServerConfig(model_names=("fake-model",)), writer)
    ) as server:
        server.engine, server.writer = engine, writer
        yield server
    writer.close()


LONG_REQUEST = {"prompt": "go on", "max_tokens": 200, "ignore_eos": True, "seed": 1}


def test_stream_disconnect_aborts_the_request(slow_server):
    engine = slow_server.engine
    seen = 0
    with httpx.stream(
        "POST", slow_server.url + "/v1/completions", json={**LONG_REQUEST, "stream": True}
    ) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                seen += 1
            if seen == 3:
                break
    wait_for(lambda: len(engine.aborted) == 1 and not engine.has_unfinished_requests())
    slow_server.writer.close()
    entries = [e.entry for e in read_log(slow_server.writer.path).entries]
    assert len(entries) == 1
    assert entries[0]["finish_reason"] == "abort"
    assert 3 <= len(entries[0]["output_token_ids"]) < 200
    assert len(entries[0]["output_token_ids"]) == len(entries[0]["logits_digests"])
    metrics = httpx.get(slow_server.url + "/metrics").text
    assert "samebits_aborted_requests_total 1" in metrics


def test_non_streaming_disconnect_aborts_the_request(slow_server):
    engine = slow_server.engine
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(slow_server.url + "/v1/completions", json={**LONG_REQUEST, "n": 2}, timeout=0.3)
    wait_for(lambda: len(engine.aborted) == 2 and not engine.has_unfinished_requests())
    assert engine.steps < 150  # stopped long before its 200 tokens
    ok = httpx.post(slow_server.url + "/v1/completions", json={"prompt": "a", "max_tokens": 2})
    assert ok.status_code == 200
    slow_server.writer.close()
    entries = [e.entry for e in read_log(slow_server.writer.path).entries]
    assert [e["finish_reason"] for e in entries[:2]] == ["abort", "abort"]
    assert all(0 < len(e["output_token_ids"]) < 200 for e in entries[:2])


def test_client_gone_before_the_first_byte_is_aborted_and_logged(slow_server):
    """A client that sends a streaming request and closes at once (it reads nothing)."""
    import json
    import socket
    from urllib.parse import urlparse

    url = urlparse(slow_server.url)
    body = json.dumps({**LONG_REQUEST, "stream": True}).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {url.hostname}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    with socket.create_connection((url.hostname, url.port)) as sock:
        sock.sendall(head + body)
    engine = slow_server.engine
    wait_for(lambda: len(engine.aborted) == 1 and not engine.has_unfinished_requests())
    wait_for(
        lambda: "samebits_aborted_requests_total 1" in httpx.get(slow_server.url + "/metrics").text
    )
    slow_server.writer.close()
    entries = [e.entry for e in read_log(slow_server.writer.path).entries]
    assert len(entries) == 1 and entries[0]["finish_reason"] == "abort"
