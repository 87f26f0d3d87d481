"""Server metrics and their Prometheus text exposition (format 0.0.4).

Counters are updated from the event loop (requests, tokens) and from the engine thread
(steps, batch sizes) under one lock. Engine-side numbers (queue length, cache hit rate,
preemptions, ...) come from `engine.stats()` at scrape time, one gauge per key.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Mapping

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# (metric name, type, help, ServerMetrics attribute or "running")
SIMPLE_METRICS = (
    ("samebits_prompt_tokens_total", "counter", "prompt tokens admitted", "prompt_tokens"),
    ("samebits_generation_tokens_total", "counter", "tokens generated", "generation_tokens"),
    ("samebits_engine_steps_total", "counter", "engine steps run", "steps"),
    ("samebits_aborted_requests_total", "counter", "requests aborted", "aborted_requests"),
    ("samebits_audit_entries_total", "counter", "audit entries written", "audit_entries"),
    ("samebits_audit_errors_total", "counter", "audit entries that failed", "audit_errors"),
    ("samebits_stream_errors_total", "counter", "streams ended by an error", "stream_errors"),
    ("samebits_running_requests", "gauge", "engine requests in flight", "running"),
)


class ServerMetrics:
    """Thread-safe counters of one server process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, int], int] = {}
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.steps = 0
        self.batch_counts = [0] * (len(BATCH_BUCKETS) + 1)
        self.batch_sum = 0
        self.aborted_requests = 0
        self.audit_entries = 0
        self.audit_errors = 0
        self.stream_errors = 0

    def on_request(self, endpoint: str, status: int) -> None:
        with self._lock:
            key = (endpoint, status)
            self.requests[key] = self.requests.get(key, 0) + 1

    def on_tokens(self, prompt: int, generated: int) -> None:
        with self._lock:
            self.prompt_tokens += prompt
            self.generation_tokens += generated

    def on_step(self, batch_size: int) -> None:
        """A step advanced `batch_size` requests (called from the engine thread)."""
        with self._lock:
            self.steps += 1
            self.batch_sum += batch_size
            index = next((i for i, b in enumerate(BATCH_BUCKETS) if batch_size <= b), -1)
            self.batch_counts[index] += 1

    def on_abort(self) -> None:
        with self._lock:
            self.aborted_requests += 1

    def on_stream_error(self) -> None:
        with self._lock:
            self.stream_errors += 1

    def on_audit(self, ok: bool) -> None:
        with self._lock:
            if ok:
                self.audit_entries += 1
            else:
                self.audit_errors += 1

    def render(self, engine_stats: Mapping[str, float], running: int) -> str:
        """The Prometheus text of every metric."""
        with self._lock:
            lines = self._render_counters(running)
            lines += self._render_batch_histogram()
        lines += _render_engine_stats(engine_stats)
        return "\n".join(lines) + "\n"

    def _render_counters(self, running: int) -> list[str]:
        name = "samebits_requests_total"
        lines = _header(name, "counter", "HTTP requests by endpoint and status")
        for (endpoint, status), count in sorted(self.requests.items()):
            lines.append(f'{name}{{endpoint="{endpoint}",status="{status}"}} {count}')
        for name, kind, help_text, attribute in SIMPLE_METRICS:
            value = running if attribute == "running" else getattr(self, attribute)
            lines += _header(name, kind, help_text)
            lines.append(f"{name} {_number(value)}")
        return lines

    def _render_batch_histogram(self) -> list[str]:
        name = "samebits_batch_size"
        lines = _header(name, "histogram", "requests advanced per engine step")
        cumulative = 0
        for bound, count in zip(BATCH_BUCKETS, self.batch_counts, strict=False):
            cumulative += count
            lines.append(f'{name}_bucket{{le="{bound}"}} {cumulative}')
        lines.append(f'{name}_bucket{{le="+Inf"}} {sum(self.batch_counts)}')
        lines.append(f"{name}_sum {self.batch_sum}")
        lines.append(f"{name}_count {sum(self.batch_counts)}")
        return lines


DERIVED = (
    ("samebits_queue_length", "gauge", "requests waiting for admission", "num_waiting_reqs"),
    ("samebits_preemptions_total", "counter", "requests preempted", "num_preemptions"),
)


def _render_engine_stats(stats: Mapping[str, float]) -> list[str]:
    lines: list[str] = []
    for name, kind, help_text, key in DERIVED:
        if key in stats:
            lines += _header(name, kind, help_text)
            lines.append(f"{name} {_number(stats[key])}")
    if "prefix_cache_queries" in stats and "prefix_cache_hits" in stats:
        queries = float(stats["prefix_cache_queries"])
        rate = float(stats["prefix_cache_hits"]) / queries if queries else 0.0
        lines += _header("samebits_cache_hit_rate", "gauge", "prefix cache hits / queries (tokens)")
        lines.append(f"samebits_cache_hit_rate {_number(rate)}")
    for key, value in stats.items():
        name = "samebits_engine_" + re.sub(r"[^a-zA-Z0-9_]", "_", str(key))
        lines += _header(name, "gauge", f"engine.stats()[{key!r}]")
        lines.append(f"{name} {_number(value)}")
    return lines


def _header(name: str, kind: str, help_text: str) -> list[str]:
    return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]


def _number(value: float) -> str:
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if value.is_integer() else repr(value)
