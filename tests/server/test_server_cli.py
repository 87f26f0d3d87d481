"""`samebits serve` and `samebits verify` as processes: start-up lines, API key, head hash
printed at shutdown equal to the endpoint's, then an independent verification."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

SRC = str(Path(__file__).resolve().parents[2] / "src")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def samebits(*args: str, **kw) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.Popen(
        [sys.executable, "-m", "samebits.cli", *args], env=env, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kw,
    )  # fmt: skip


def wait_healthy(url: str, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline
        try:
            if httpx.get(url + "/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)


def test_serve_then_verify(tiny_llama_dir, tmp_path):
    log = tmp_path / "audit.jsonl"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = samebits("serve", "--model", str(tiny_llama_dir), "--port", str(port),
                      "--audit-log", str(log), "--api-key", "k3y", "--log-level", "warning")  # fmt: skip
    try:
        wait_healthy(url, server)
        auth = {"Authorization": "Bearer k3y"}
        assert httpx.get(url + "/v1/models").status_code == 401
        for i in range(3):
            body = {"prompt": f"cli test {i}", "max_tokens": 5, "temperature": 0.9, "n": 2}
            assert (
                httpx.post(url + "/v1/completions", json=body, headers=auth, timeout=60).status_code
                == 200
            )
        head = httpx.get(url + "/v1/audit/head", headers=auth).json()
    finally:
        server.send_signal(signal.SIGINT)
        _, stderr = server.communicate(timeout=60)
    assert f"audit log:   {log}" in stderr
    assert re.search(r"fingerprint: [0-9a-f]{64}", stderr)
    assert f"audit log head: seq {head['seq']} entry_hash {head['entry_hash']}" in stderr
    assert head["seq"] == 6  # one session entry, then 3 calls x 2 choices

    verify = samebits("verify", str(log), "--model", str(tiny_llama_dir), "--sample", "3",
                      "--seed", "1", "--head", head["entry_hash"])  # fmt: skip
    out, err = verify.communicate(timeout=120)
    assert verify.returncode == 0, out + err
    assert out.count(" PASS ") == 3 and "result: PASS" in out

    refused = samebits("verify", str(log), "--model", str(tiny_llama_dir), "--kernel-plan", "fast")
    out, err = refused.communicate(timeout=120)
    assert refused.returncode == 2 and "refusing to verify" in out


def test_keep_alive_outlasts_the_clients_idle_expiry(monkeypatch):
    """`serve` keeps idle connections open longer than httpx (the OpenAI SDK's transport)
    keeps them in its pool, and hands that to uvicorn: a client never reuses a connection
    the server is closing at that instant (uvicorn's own default equals httpx's, 5 s)."""
    import argparse

    import uvicorn

    from samebits.server import cli

    parser = argparse.ArgumentParser()
    cli.add_serve_arguments(parser)
    args = parser.parse_args(["--no-audit-log"])
    assert args.timeout_keep_alive > httpx.Limits().keepalive_expiry
    seen = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.update(kw))
    monkeypatch.setattr(cli, "open_audit_log", lambda *a: None)
    monkeypatch.setattr(cli, "_announce", lambda *a: None)
    from samebits.engine import engine as engine_mod

    monkeypatch.setattr(engine_mod.LLMEngine, "from_args", classmethod(lambda cls, **kw: _Stub()))
    monkeypatch.setattr(cli, "server_config", lambda a, e: None)
    import samebits.server.app as app_mod

    monkeypatch.setattr(app_mod, "build_app", lambda *a: object())
    assert cli.serve_main(args) == 0
    assert seen["timeout_keep_alive"] == args.timeout_keep_alive


def test_tool_call_parser_flag_reaches_the_server_config():
    import argparse

    import pytest

    from samebits.server import cli

    parser = argparse.ArgumentParser()
    cli.add_serve_arguments(parser)
    engine = _Stub()
    assert cli.server_config(parser.parse_args([]), engine).tool_call_parser is None
    args = parser.parse_args(["--tool-call-parser", "mistral"])
    config = cli.server_config(args, engine)
    assert config.tool_call_parser == "mistral"
    assert cli._tool_line(config, engine) == "parser mistral (--tool-call-parser)"
    assert "pass --tool-call-parser" in cli._tool_line(
        cli.server_config(parser.parse_args([]), engine), engine
    )
    with pytest.raises(SystemExit):
        parser.parse_args(["--tool-call-parser", "pythonic"])


class _Stub:
    model_name = "stub"
