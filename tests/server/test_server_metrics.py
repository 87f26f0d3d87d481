"""/metrics: the names and values docs/server.md promises, exposed by prometheus_client
(parsed back with its own parser), Prometheus text by default and OpenMetrics on request."""

from __future__ import annotations

import time

import httpx
import pytest
from fake_engine import FakeEngine
from harness import RunningServer
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families

from samebits.server.app import build_app
from samebits.server.config import ServerConfig
from samebits.server.metrics import ServerMetrics


class StatsEngine(FakeEngine):
    """A fake engine reporting the scheduler keys the derived metrics read."""

    def stats(self) -> dict[str, float]:
        return {
            "num_waiting_reqs": 3,
            "num_preemptions": 2,
            "prefix_cache_queries": 40,
            "prefix_cache_hits": 10,
            "num.odd-key": 1.5,
        }


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


@pytest.fixture(scope="module")
def server():
    engine = StatsEngine()
    with RunningServer(build_app(engine, ServerConfig(model_names=("m",)))) as running:
        running.engine = engine
        yield running


def test_counters_histogram_and_engine_gauges(server):
    body = {"prompt": "count me", "max_tokens": 3, "n": 2, "seed": 7}
    answer = httpx.post(server.url + "/v1/completions", json=body)
    assert answer.status_code == 200
    # a choice may draw EOS early (the fake engine samples it), so count what was served
    generated = answer.json()["usage"]["completion_tokens"]
    assert httpx.post(server.url + "/v1/completions", json={"prompt": ""}).status_code == 400
    deadline = time.monotonic() + 10
    while True:  # the engine thread counts a step just after handing its outputs out, and a
        # call's tokens are counted when it settles, which may be after its response was sent
        response = httpx.get(server.url + "/metrics")
        got = samples(response.text)
        settled = got[("samebits_generation_tokens_total", ())] == generated
        if settled and got[("samebits_engine_steps_total", ())] == server.engine.steps:
            break
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert response.headers["content-type"].startswith("text/plain")
    ok = (("endpoint", "/v1/completions"), ("status", "200"))
    bad = (("endpoint", "/v1/completions"), ("status", "400"))
    assert got[("samebits_requests_total", ok)] == 1
    assert got[("samebits_requests_total", bad)] == 1
    prompt_len = len(server.engine.tokenizer.encode("count me", add_special_tokens=True))
    assert got[("samebits_prompt_tokens_total", ())] == prompt_len  # one prompt, n = 2
    assert got[("samebits_generation_tokens_total", ())] == generated > 0
    steps = got[("samebits_engine_steps_total", ())]
    assert steps == server.engine.steps >= 3
    assert got[("samebits_batch_size_count", ())] == steps
    assert got[("samebits_batch_size_sum", ())] == sum(server.engine.batch_sizes)
    assert got[("samebits_batch_size_bucket", (("le", "+Inf"),))] == steps
    assert got[("samebits_batch_size_bucket", (("le", "2.0"),))] == steps  # n=2: 2 per step
    assert got[("samebits_running_requests", ())] == 0
    assert got[("samebits_queue_length", ())] == 3
    assert got[("samebits_preemptions_total", ())] == 2
    assert got[("samebits_cache_hit_rate", ())] == 0.25
    assert got[("samebits_engine_num_odd_key", ())] == 1.5
    for name in ("aborted_requests", "stream_errors", "audit_entries", "audit_errors"):
        assert got[(f"samebits_{name}_total", ())] == 0


def test_openmetrics_on_request(server):
    accept = "application/openmetrics-text; version=1.0.0"
    response = httpx.get(server.url + "/metrics", headers={"Accept": accept})
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    names = {f.name for f in parse_om(response.text)}
    assert {"samebits_requests", "samebits_batch_size", "samebits_queue_length"} <= names


def test_failing_engine_stats_do_not_fail_a_scrape():
    metrics = ServerMetrics()

    def broken() -> dict[str, float]:
        raise RuntimeError("read mid-step")

    metrics.watch(broken, lambda: 5)
    metrics.on_audit(False)
    got = samples(metrics.render())
    assert got[("samebits_running_requests", ())] == 5
    assert got[("samebits_audit_errors_total", ())] == 1
    assert not any(name.startswith("samebits_engine_num") for name, _ in got)


def test_each_app_has_its_own_registry():
    first, second = ServerMetrics(), ServerMetrics()
    first.on_abort()
    assert samples(second.render())[("samebits_aborted_requests_total", ())] == 0
