"""Server metrics, kept and exposed by `prometheus_client` (one registry per app).

Counters and the batch-size histogram are updated from the event loop (requests, tokens,
aborts, audit entries) and from the engine thread (steps); `prometheus_client` metrics are
thread-safe. Scrape-time values (requests in flight, `engine.stats()`) come from a collector
that calls the providers given to `ServerMetrics.watch`: one gauge per `engine.stats()` key,
plus the queue length, preemptions and prefix-cache hit rate derived from them.

Names (documented in docs/server.md): `samebits_requests_total{endpoint,status}`,
`samebits_prompt_tokens_total`, `samebits_generation_tokens_total`,
`samebits_engine_steps_total`, `samebits_batch_size` (histogram), `samebits_running_requests`,
`samebits_queue_length`, `samebits_preemptions_total`, `samebits_cache_hit_rate`,
`samebits_aborted_requests_total`, `samebits_stream_errors_total`,
`samebits_audit_entries_total`, `samebits_audit_errors_total`, `samebits_engine_<key>`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

logger = logging.getLogger("samebits.server")

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
StatsProvider = Callable[[], Mapping[str, float]]
RunningProvider = Callable[[], int]
# derived from engine.stats(): (metric name, kind, help, stats key)
DERIVED = (
    ("samebits_queue_length", "gauge", "requests waiting for admission", "num_waiting_reqs"),
    ("samebits_preemptions", "counter", "requests preempted", "num_preemptions"),
)


class ServerMetrics:
    """The metrics of one server process, in their own `CollectorRegistry`."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._requests = Counter(
            "samebits_requests", "HTTP requests by endpoint and status",
            ["endpoint", "status"], registry=r,
        )  # fmt: skip
        self._prompt_tokens = Counter(
            "samebits_prompt_tokens", "prompt tokens admitted", registry=r
        )
        self._generation_tokens = Counter(
            "samebits_generation_tokens", "tokens generated", registry=r
        )
        self._steps = Counter("samebits_engine_steps", "engine steps run", registry=r)
        self._batch_size = Histogram(
            "samebits_batch_size", "requests advanced per engine step",
            buckets=BATCH_BUCKETS, registry=r,
        )  # fmt: skip
        self._aborted = Counter("samebits_aborted_requests", "requests aborted", registry=r)
        self._audit_entries = Counter("samebits_audit_entries", "audit entries written", registry=r)
        self._audit_errors = Counter(
            "samebits_audit_errors", "audit entries that failed", registry=r
        )
        self._stream_errors = Counter(
            "samebits_stream_errors", "streams ended by an error", registry=r
        )
        self._scrape = _ScrapeCollector()
        r.register(self._scrape)

    def watch(self, engine_stats: StatsProvider, running: RunningProvider) -> None:
        """Where scrape-time values come from: `engine.stats()` and requests in flight."""
        self._scrape.engine_stats = engine_stats
        self._scrape.running = running

    def on_request(self, endpoint: str, status: int) -> None:
        self._requests.labels(endpoint, str(status)).inc()

    def on_tokens(self, prompt: int, generated: int) -> None:
        self._prompt_tokens.inc(prompt)
        self._generation_tokens.inc(generated)

    def on_step(self, batch_size: int) -> None:
        """A step advanced `batch_size` requests (called from the engine thread)."""
        self._steps.inc()
        self._batch_size.observe(batch_size)

    def on_abort(self) -> None:
        self._aborted.inc()

    def on_stream_error(self) -> None:
        self._stream_errors.inc()

    def on_audit(self, ok: bool) -> None:
        (self._audit_entries if ok else self._audit_errors).inc()

    def exposition(self, accept: str | None = None) -> tuple[bytes, str]:
        """(body, content type) of a scrape: Prometheus text, or OpenMetrics if `accept`
        (the request's Accept header) asks for it."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type

    def render(self) -> str:
        """The Prometheus text of every metric."""
        body, _ = self.exposition()
        return body.decode()


class _ScrapeCollector(Collector):
    """Values read when scraped: requests in flight and `engine.stats()`."""

    def __init__(self) -> None:
        self.engine_stats: StatsProvider = dict
        self.running: RunningProvider = lambda: 0

    def collect(self) -> Iterator[Metric]:
        running = GaugeMetricFamily("samebits_running_requests", "engine requests in flight")
        running.add_metric([], self.running())
        yield running
        yield from engine_stat_metrics(self._stats())

    def _stats(self) -> Mapping[str, float]:
        try:
            return dict(self.engine_stats())
        except Exception:  # read while the engine thread steps; a scrape must not fail
            logger.debug("engine.stats() failed", exc_info=True)
            return {}


def engine_stat_metrics(stats: Mapping[str, float]) -> Iterator[Metric]:
    """The metric families derived from one `engine.stats()` snapshot."""
    for name, kind, help_text, key in DERIVED:
        if key in stats:
            family = CounterMetricFamily if kind == "counter" else GaugeMetricFamily
            yield family(name, help_text, value=float(stats[key]))
    if "prefix_cache_queries" in stats and "prefix_cache_hits" in stats:
        queries = float(stats["prefix_cache_queries"])
        rate = float(stats["prefix_cache_hits"]) / queries if queries else 0.0
        yield GaugeMetricFamily(
            "samebits_cache_hit_rate", "prefix cache hits / queries (tokens)", value=rate
        )
    for key, value in stats.items():
        name = "samebits_engine_" + re.sub(r"[^a-zA-Z0-9_]", "_", str(key))
        yield GaugeMetricFamily(name, f"engine.stats()[{key!r}]", value=float(value))
