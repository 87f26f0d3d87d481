"""The server over the real engine on the tiny random llama: batching never changes a bit,
and a client that disconnects frees its KV blocks; with and without async scheduling (the
GPU default: step n+1 launched before step n's outputs are built)."""

from __future__ import annotations

import time

import httpx
import pytest
from harness import RunningServer
from openai_workload import make_requests, run_workload

from samebits.engine.engine import LLMEngine
from samebits.server.app import build_app
from samebits.server.config import ServerConfig

NUM_KV_BLOCKS = 96


@pytest.fixture(scope="module", params=[False, True], ids=["sync", "async-scheduling"])
def tiny_server(tiny_llama_dir, request):
    engine = LLMEngine.from_args(
        str(tiny_llama_dir), max_num_seqs=24, max_num_batched_tokens=128, block_size=4,
        num_kv_blocks=NUM_KV_BLOCKS, async_scheduling=request.param,
    )  # fmt: skip
    with RunningServer(build_app(engine, ServerConfig(model_names=("tiny",)))) as server:
        server.engine = engine
        yield server


def test_64_concurrent_openai_requests_equal_one_by_one(tiny_server):
    requests = make_requests(64, max_tokens=10)
    concurrent = run_workload(tiny_server.url, "tiny", requests, concurrent=True)
    stats_after_concurrent = tiny_server.engine.stats()
    sequential = run_workload(tiny_server.url, "tiny", requests, concurrent=False)
    for i, (a, b) in enumerate(zip(concurrent, sequential, strict=True)):
        assert a["token_ids"] == b["token_ids"], i
        assert a["digests"] == b["digests"], i
        assert a["logprobs"] == b["logprobs"], i  # floats parsed from JSON, compared exactly
        assert a["text"] == b["text"] and a["finish_reason"] == b["finish_reason"], i
    assert all(r["fingerprint"] == tiny_server.engine.fingerprint for r in concurrent)
    assert stats_after_concurrent["num_preemptions"] > 0  # the small cache forced preemptions


def test_disconnect_mid_stream_frees_the_blocks(tiny_server):
    engine = tiny_server.engine
    free_before = engine.stats()["num_free_blocks"]
    steps_before = engine.stats()["num_steps"]
    body = {
        "prompt": "A long story:",
        "max_tokens": 200,
        "ignore_eos": True,
        "stream": True,
        "seed": 3,
    }
    with httpx.stream(
        "POST", tiny_server.url + "/v1/completions", json=body, timeout=60
    ) as response:
        for i, _line in enumerate(response.iter_lines()):
            if i == 6:
                break
    deadline = time.monotonic() + 20
    while engine.has_unfinished_requests() or engine.stats()["num_free_blocks"] != free_before:
        assert time.monotonic() < deadline, engine.stats()
        time.sleep(0.02)
    assert engine.stats()["num_free_blocks"] == free_before
    assert engine.stats()["num_steps"] - steps_before < 150  # aborted long before 200 tokens
    assert "samebits_aborted_requests_total 1" in httpx.get(tiny_server.url + "/metrics").text
