"""What a launched step hands the engine: the rows' argmax early, the rows themselves when
they reach the host. Torch-free (the GPU implementation, `DeviceStep`, is in `runner.py`).

A runner's `launch(sched_out)` returns a `StepResult` at once; on a GPU the forward is still
running then. `greedy()` waits only for each sampled row's argmax (index and value, a few
bytes per row), `rows()` for the float32 rows (512 KB per row of a 128k vocabulary), which
the engine needs for digests, logprobs and non-greedy sampling. Invariant: both describe the
same rows, the rows `execute` would return; `greedy()[rid]` is (numpy's `argmax` of
`rows()[rid]`, the value there), or `greedy()` is None where the runner has no argmax.
`tokens()` is the same argmax where the runner keeps it (an array on the runner's device, in
row order, and `request_id -> row`): what a step scheduled ahead is fed
(`Scheduler.schedule_ahead`, `ModelRunner.launch(..., feed=)`), without a trip to the host.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import numpy as np


class StepLogits(dict):
    """What `ModelRunner.execute` returns: a dict `request_id -> float32 logits row` for each
    `sample=True` request (what a sampler needs), plus `chunk_rows`: `request_id ->
    (start_position, float32 [n, vocab])` for each `all_rows` chunk, row j being position
    `start_position + j` (its last row is also the sampled row when the chunk samples)."""

    def __init__(self, sampled=(), chunk_rows=None) -> None:
        super().__init__(sampled)
        self.chunk_rows: dict[str, tuple[int, np.ndarray]] = dict(chunk_rows or {})


class StepResult(Protocol):
    """A launched step (see the module docstring)."""

    def greedy(self) -> dict[str, tuple[int, float]] | None: ...

    def rows(self) -> StepLogits: ...

    def tokens(self) -> tuple[object, dict[str, int]]: ...

    def digests(self) -> Mapping[str, object] | None:
        """Each sampled row's `logits_digest`, future-like (`result()`), where the runner
        computes them next to the rows (a GPU); None: the engine hashes the host rows."""


class ReadyStep:
    """A step whose rows are already on the host (the CPU, or a runner that only executes).
    Its `greedy()` and `tokens()` are numpy's argmax of the host rows, taken here on the
    calling thread (microseconds a row: a plain-greedy row then never waits for the row
    workers, which hash the previous steps' rows)."""

    def __init__(self, rows: StepLogits) -> None:
        self._rows = rows
        self._top: dict[str, int] | None = None

    def _argmax(self) -> dict[str, int]:
        if self._top is None:
            self._top = {rid: int(np.argmax(row)) for rid, row in self._rows.items()}
        return self._top

    def greedy(self) -> dict[str, tuple[int, float]]:
        rows = self._rows
        return {rid: (i, float(rows[rid][i])) for rid, i in self._argmax().items()}

    def digests(self) -> None:
        return None

    def tokens(self) -> tuple[np.ndarray, dict[str, int]]:
        row_of = {rid: i for i, rid in enumerate(self._rows)}
        return np.array(list(self._argmax().values()), dtype=np.int64), row_of

    def rows(self) -> StepLogits:
        return self._rows


class Runner(Protocol):
    """What `LLMEngine` drives (`ModelRunner`; a test's or a benchmark's stand-in implements
    the same). Capabilities are fixed per runner; the engine's `RuntimeConfig` decides
    whether to use them. No value depends on a capability or a hint: the rows and digests of
    a step are the same bits with or without them."""

    feeds_tokens: bool  # launch(feed=) takes a step scheduled ahead (fed on the device)
    hashes_on_device: bool  # launch(device_digests=True) gives `digests()` from the device

    def launch(
        self, sched_out: Any, feed: StepResult | None = None, copy_rows: bool = True,
        device_digests: bool = False,
    ) -> StepResult:  # fmt: skip
        """Start the step (on a GPU it may still run when this returns). `copy_rows` False:
        the rows cross to the host only when `rows()` asks."""

    def stats(self) -> dict[str, int]:
        """Counters for /metrics (graph replays, eager steps); may be empty."""
