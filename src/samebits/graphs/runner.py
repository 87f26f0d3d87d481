"""Decode steps replayed from per-bucket graphs (CUDA graphs on a GPU, `EagerStepGraph` in CPU
tests); see `policy` for which steps, `decode_buffers` for the static inputs and the
padding invariant.

Invariant: for a step that replays, the logits row of each real request is the row the eager
forward gives it: the graph runs the same op set with the same launch choices on a batch of
`bucket` rows whose first rows are the step's requests, and every op of an invariant plan is
row-local (a row's bits do not depend on the other rows or on M). Padding rows write K/V only
to the sink block and their logits are dropped.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Sequence

import torch

from samebits.graphs.decode_buffers import DecodeBuffers
from samebits.graphs.policy import GraphConfig, graph_bucket
from samebits.graphs.step_graph import StepGraph, step_graph_factory

logger = logging.getLogger("samebits.graphs")
# attention kernels whose decode steps read the static program map (the GPU plans': the fast
# plan's per-request SDPA loop plans on the host, so its graphed decode steps use the paged
# Triton kernel)
STATIC_META_ATTENTION = ("triton-paged", "sdpa")


class DecodeGraphRunner:
    """Captures one graph per bucket of `config` over `model.forward` and replays it."""

    def __init__(self, model, kv_cache, config: GraphConfig, block_size: int, sink_block: int,
                 max_model_len: int) -> None:  # fmt: skip
        self.model, self.kv_cache, self.config = model, kv_cache, config
        plan = model.plan
        group = plan.group if plan.attention_kernel in STATIC_META_ATTENTION else None
        width = -(-max_model_len // block_size)
        device = torch.device(model.ops.device)
        self.buffers = DecodeBuffers(
            config.buckets[-1],
            width,
            block_size,
            sink_block,
            device,
            group,
            plan.attention_span,
        )
        self._new_graph = step_graph_factory(device)
        # (bucket, long): a long step (some position past the first attention span) replays
        # the graph whose attention may split the KV; others the one whose attention runs
        # spans in sequence. Both compute the same bits.
        self.span = plan.attention_span
        # both variants at start-up when a request can outgrow the first span (no capture or
        # kernel compile mid-serving); tests that capture on first use get either on demand
        self._variants = (False, True) if width * block_size > self.span else (False,)
        self.graphs: dict[tuple[int, bool], StepGraph] = {}
        self.counts: Counter[str] = Counter()
        self.capture_seconds = 0.0  # of capture_all (start-up capture)
        self._announced: set[str] = set()

    def capture_all(self) -> float:
        """Capture every bucket, largest first (smaller graphs reuse the pool's memory);
        returns and logs the seconds it took."""
        start = time.perf_counter()
        for bucket in reversed(self.config.buckets):
            for long in self._variants:
                self._capture(bucket, long)
        seconds = self.capture_seconds = time.perf_counter() - start
        logger.info("captured %d decode graphs in %.1f s: %s", len(self.graphs), seconds,
                    self.config.describe())  # fmt: skip
        return seconds

    def _capture(self, bucket: int, long: bool) -> StepGraph:
        """A graph of the forward over `bucket` padding rows (the static buffers are filled
        with padding first: capture writes K/V to the sink block only)."""
        self.buffers.fill((), bucket)
        batch = self.buffers.batch(bucket, long)
        graph, model, kv = self._new_graph(), self.model, self.kv_cache  # no cycle to self
        graph.capture(lambda: model.forward(batch, kv))
        self.graphs[bucket, long] = graph
        return graph

    def run(self, scheduled: Sequence, fed=None) -> torch.Tensor | None:
        """The float32 logits [len(scheduled), vocab] (on the device) of a step that replays
        a graph, or None for a step that must run eagerly (the reason is logged once).
        `fed`: input ids gathered from a previous step's tokens (`DecodeBuffers.fill`)."""
        bucket, reason = graph_bucket(scheduled, self.config.buckets)
        if bucket is None:
            self._eager(reason)
            return None
        long = max(r.start_position for r in scheduled) >= self.span
        graph = self.graphs.get((bucket, long)) or self._capture(bucket, long)
        self.buffers.fill(scheduled, bucket, fed)
        self.counts["graph_steps"] += 1
        return graph.replay()[: len(scheduled)]

    def _eager(self, reason: str) -> None:
        self.counts["eager_steps"] += 1
        if reason not in self._announced:
            self._announced.add(reason)
            logger.info("cuda graphs: a step runs eagerly: %s (said once per reason)", reason)

    def stats(self) -> dict[str, int]:
        """Steps replayed from a graph and steps run eagerly, and the graphs captured."""
        return {
            "graph_steps": self.counts["graph_steps"],
            "eager_steps": self.counts["eager_steps"],
            "graphs_captured": len(self.graphs),
        }
