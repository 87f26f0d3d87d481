"""When a step replays a CUDA graph: the padded batch-size buckets and the fallback rules.

Pure Python (no torch): the runner asks `graph_bucket` for each step and gets either the
bucket whose graph it replays or the reason the step runs eagerly.

Invariants:
- a graphed step is a *pure decode* step: every scheduled request brings exactly one token
  and none asks for all rows (prompt logprobs); the forward of such a step has the same
  shape for every step of the same bucket;
- the bucket is the smallest one >= the number of requests; the rows past them are padding
  (see `samebits.graphs.decode_buffers`), whose logits are dropped;
- the bucket list is a function of `max_num_seqs` only (static), never of runtime state.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# Padded batch sizes a decode graph is captured for (dense where batches are small, then
# steps of a quarter to a half): at most 33% padding rows above 4 requests.
DEFAULT_BUCKETS = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256)

NOT_DECODE = "not a pure decode step (a prompt chunk, or prompt-logprob rows)"
TOO_LARGE = "more requests than the largest graph bucket"


@dataclass(frozen=True)
class GraphConfig:
    """Whether decode steps replay CUDA graphs, for which buckets, and when they are captured.

    `capture_at_start`: capture every bucket when the runner is built (the cost is logged),
    so no request ever waits for a capture; otherwise a bucket is captured on its first use.
    Invariant: `buckets` is strictly increasing and starts at 1 when enabled.
    """

    enabled: bool = False
    buckets: tuple[int, ...] = ()
    capture_at_start: bool = True

    def __post_init__(self) -> None:
        b = self.buckets
        rising = all(x < y for x, y in zip(b, b[1:], strict=False))
        if self.enabled and (not b or b[0] != 1 or not rising):
            raise ValueError(f"graph buckets must increase strictly from 1, got {b!r}")

    def describe(self) -> str:
        """One line for `samebits info` and the start-up log."""
        if not self.enabled:
            return "cuda graphs: off (every step runs eagerly)"
        when = "at start-up" if self.capture_at_start else "on first use"
        return (
            f"cuda graphs: decode steps, batch buckets {list(self.buckets)} (captured {when}); "
            "other steps run eagerly"
        )


def decode_buckets(max_num_seqs: int, candidates: Sequence[int] = DEFAULT_BUCKETS) -> tuple:
    """The candidates below `max_num_seqs`, then `max_num_seqs` itself if no candidate is
    larger (a step never holds more requests than that); all of them if it exceeds the last."""
    below = tuple(b for b in candidates if b < max_num_seqs)
    return below + (max_num_seqs,) if max_num_seqs <= candidates[-1] else tuple(candidates)


def graph_config(device: str, enforce_eager: bool, max_num_seqs: int, **kw) -> GraphConfig:
    """Graphs on for CUDA unless `enforce_eager` (vLLM's name); never on the CPU."""
    if device != "cuda" or enforce_eager:
        return GraphConfig()
    return GraphConfig(True, decode_buckets(max_num_seqs), **kw)


def is_pure_decode(scheduled: Sequence) -> bool:
    """Every request brings one token and none asks for all rows."""
    return all(len(s.token_ids) == 1 and not s.all_rows for s in scheduled)


def graph_bucket(scheduled: Sequence, buckets: Sequence[int]) -> tuple[int | None, str]:
    """(bucket, "") for a step that replays a graph; (None, reason) for one that runs eagerly."""
    if not scheduled or not is_pure_decode(scheduled):
        return None, NOT_DECODE
    n = len(scheduled)
    for b in buckets:
        if b >= n:
            return b, ""
    return None, TOO_LARGE
