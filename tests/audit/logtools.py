"""Helpers of the audit tests: serve requests into a log, and rewrite a log as a dishonest
provider would (editing entries and re-sealing the whole chain so it stays consistent)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from harness import RunningServer

from samebits.audit import AuditLogWriter
from samebits.audit.chain import GENESIS_HASH, canonical_json, seal_entry
from samebits.server.app import build_app
from samebits.server.config import ServerConfig


def serve_into_log(engine: Any, log_path: Path, bodies: list[dict], max_n: int = 4) -> list[dict]:
    """Send `bodies` to /v1/completions concurrently through a real server; return the JSON."""
    writer = AuditLogWriter(log_path)
    config = ServerConfig(model_names=("m",), max_n=max_n)
    with RunningServer(build_app(engine, config, writer)) as server:

        async def send_all() -> list[dict]:
            async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
                responses = await asyncio.gather(
                    *(client.post("/v1/completions", json=b) for b in bodies)
                )
            assert all(r.status_code == 200 for r in responses), [
                r.text for r in responses if r.status_code != 200
            ][:3]
            return [r.json() for r in responses]

        results = asyncio.run(send_all())
    writer.close()
    return results


def load_entries(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def reseal(path: Path, entries: list[dict]) -> None:
    """Write `entries` back with a freshly computed, internally consistent chain."""
    prev, lines = GENESIS_HASH, []
    for seq, entry in enumerate(entries):
        record = {k: v for k, v in entry.items() if k not in ("seq", "prev_hash", "entry_hash")}
        sealed = seal_entry(record, seq, prev)
        prev = sealed["entry_hash"]
        lines.append(canonical_json(sealed) + "\n")
    path.write_text("".join(lines))


def tamper(path: Path, edit: Callable[[int, dict], bool]) -> list[int]:
    """Apply `edit(seq, entry)` to every request entry (True = edited), re-seal; edited seqs."""
    entries = load_entries(path)
    edited = [e["seq"] for e in entries if e["type"] == "request" and edit(e["seq"], e)]
    reseal(path, entries)
    return edited
