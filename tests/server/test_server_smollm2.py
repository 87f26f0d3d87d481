"""A few end-to-end requests on the default model (SmolLM2-135M-Instruct): chat through the
model's template, stream == non-stream == alone, and the audit entries replay bit for bit."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from harness import RunningServer

from samebits.audit import AuditLogWriter, check_chain, read_log
from samebits.audit.replay import replay_entry
from samebits.engine.engine import LLMEngine
from samebits.server.app import build_app
from samebits.server.config import ServerConfig

pytestmark = pytest.mark.slow

CHAT = {
    "messages": [{"role": "user", "content": "What is the capital of France?"}],
    "max_tokens": 8,
    "temperature": 0.0,
    "seed": 0,
}


def ext_of(body: dict) -> dict:
    return body["choices"][0]["samebits"]


def test_smollm2_end_to_end(smollm2_model, tmp_path):
    engine = LLMEngine.from_loaded(smollm2_model, max_num_seqs=4)
    writer = AuditLogWriter(tmp_path / "audit.jsonl")
    with RunningServer(build_app(engine, ServerConfig(model_names=("smollm2",)), writer)) as server:

        async def together() -> tuple[dict, list[str], dict]:
            async with httpx.AsyncClient(base_url=server.url, timeout=600) as client:
                whole, streamed, completion = await asyncio.gather(
                    client.post("/v1/chat/completions", json=CHAT),
                    _stream(client, {**CHAT, "stream": True}),
                    client.post(
                        "/v1/completions",
                        json={
                            "prompt": "Once upon a time",
                            "max_tokens": 6,
                            "temperature": 0.8,
                            "seed": 42,
                        },
                    ),
                )
            return whole.json(), streamed, completion.json()

        whole, streamed, completion = asyncio.run(together())
        alone = httpx.post(server.url + "/v1/chat/completions", json=CHAT, timeout=600).json()
    writer.close()
    assert "Paris" in whole["choices"][0]["message"]["content"]
    assert ext_of(whole)["logits_digests"] == ext_of(alone)["logits_digests"]
    assert ext_of(whole)["token_ids"] == ext_of(alone)["token_ids"]
    assert "".join(streamed) == whole["choices"][0]["message"]["content"]
    assert completion["system_fingerprint"] == engine.fingerprint
    contents = read_log(writer.path)
    assert len(contents.entries) == 4
    assert check_chain(contents.entries) == []
    logged = next(e for e in contents.entries if e.entry["endpoint"] == "/v1/completions")
    assert replay_entry(engine, logged).ok


async def _stream(client: httpx.AsyncClient, body: dict) -> list[str]:
    pieces = []
    async with client.stream("POST", "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                delta = json.loads(line[6:])["choices"][0]["delta"]
                pieces.append(delta.get("content", ""))
    return pieces
