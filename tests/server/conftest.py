"""Fixtures of the server tests: a fake-engine server with an audit log."""

from __future__ import annotations

import pytest
from fake_engine import FakeEngine
from harness import RunningServer

from samebits.audit.writer import AuditLogWriter
from samebits.server.app import build_app
from samebits.server.config import ServerConfig


@pytest.fixture(scope="module")
def fake_server(tmp_path_factory):
    """A server over a FakeEngine (max_model_len 256, 8 seqs per step), audit log on."""
    engine = FakeEngine()
    log_path = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    writer = AuditLogWriter(log_path)
    config = ServerConfig(model_names=("fake-model",), max_n=4, max_body_bytes=64 * 1024)
    with RunningServer(build_app(engine, config, writer)) as server:
        server.engine = engine
        server.writer = writer
        server.log_path = log_path
        yield server
    writer.close()
