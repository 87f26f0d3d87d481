"""Teacher-forced replay: an entry's logits rows computed from its logged tokens by chunked
prefill passes (one forward per CHUNK positions) instead of one decode step per token.

Why the verdict is the stepwise replay's (the spec, `samebits/spec/reference.py`): Ref's row
for output i is the last row of a cold forward over ``prompt + tokens[:i]``; the invariant
plans' rows do not depend on batch, chunking or cache (certificates; the determinism
matrix), so row ``P + i - 1`` of a chunked forward over ``prompt + logged tokens`` is Ref's
row i as long as the replay's own tokens before i are the logged ones. The engine still
schedules, samples (seeds, penalties, grammars), detokenizes and stops as in a stepwise
replay; only the rows' source changes. A row is served from the forced pass only while the
replay's history equals the logged one; past a divergence or the log's end it is a cold
forward over the replay's actual history (Ref itself, `runner.cold_logits`).

What gains: the emulated (or GPU) linears run on CHUNK rows at once, where decode runs one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from samebits.engine.runner import COLD_BLOCK as BLOCK
from samebits.engine.runner import ModelRunner, build_flat_batch, cold_logits
from samebits.engine.scheduler import ScheduledRequest
from samebits.engine.step_result import ReadyStep, StepLogits, StepResult

CHUNK = 256  # positions per forced forward: bounds the rows held (CHUNK x vocab x 4 bytes)


@dataclasses.dataclass
class ForcedPass:
    """One expected request: its logged tokens, the pass's own KV cache and latest rows."""

    token_ids: tuple[int, ...]  # prompt + logged outputs
    first_row: int  # the first position whose row the replay reads
    kv: Any
    done: int = 0  # positions whose keys and values are in `kv`
    rows: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)
    history: list[int] = dataclasses.field(default_factory=list)  # tokens the engine fed
    matched: int = 0  # length of the common prefix of `history` and `token_ids`

    def feed(self, s: ScheduledRequest) -> None:
        """Take a scheduled chunk's tokens: they continue the history, or (a recomputation
        after preemption) restart it at `start_position`."""
        if s.start_position > len(self.history):
            raise RuntimeError(
                f"forced replay: {s.request_id!r} scheduled at {s.start_position}, "
                f"past its {len(self.history)} tokens"
            )
        del self.history[s.start_position :]
        self.matched = min(self.matched, s.start_position)
        self.history.extend(s.token_ids)
        while (
            self.matched < min(len(self.history), len(self.token_ids))
            and self.history[self.matched] == self.token_ids[self.matched]
        ):
            self.matched += 1


class ForcedRowsRunner:
    """A `Runner` serving expected requests' rows from forced passes (module docstring);
    every other step goes to the wrapped `ModelRunner`. Rows are host float32, digests are
    hashed on the host; the rows' bits are what the wrapped runner's model computes."""

    feeds_tokens = False
    hashes_on_device = False

    def __init__(self, inner: ModelRunner, deployment: Any, chunk: int = CHUNK) -> None:
        self.inner = inner
        self.deployment = deployment
        self.model = deployment.model
        self.chunk = chunk
        self.passes: dict[str, ForcedPass] = {}
        self.forced_forwards = 0
        self.cold_forwards = 0

    def expect(self, request_id: str, token_ids: Sequence[int], first_row: int) -> None:
        """The next request `request_id` should continue as `token_ids` (prompt + logged
        outputs); rows before `first_row` are not read (prompt logprobs: 0)."""
        ids = tuple(int(t) for t in token_ids)
        kv = self.model.new_kv_cache(-(-len(ids) // BLOCK) * BLOCK)
        self.passes[request_id] = ForcedPass(ids, max(0, first_row), kv)

    def forget(self, request_id: str) -> None:
        self.passes.pop(request_id, None)

    def launch(
        self, sched_out: Any, feed: StepResult | None = None, copy_rows: bool = True,
        device_digests: bool = False,
    ) -> StepResult:  # fmt: skip
        scheduled = sched_out.scheduled
        forced = [s for s in scheduled if s.request_id in self.passes]
        if not forced:
            return self.inner.launch(sched_out, feed, copy_rows, device_digests)
        if len(forced) != len(scheduled) or feed is not None:
            raise RuntimeError("forced replay: an expected request must run alone")
        sampled, chunks = {}, {}
        for s in scheduled:
            f = self.passes[s.request_id]
            f.feed(s)
            last = s.start_position + len(s.token_ids) - 1
            if s.all_rows:
                rows = [self._row(f, p) for p in range(s.start_position, last + 1)]
                chunks[s.request_id] = (s.start_position, np.stack(rows))
            if s.sample:
                sampled[s.request_id] = self._row(f, last)
        return ReadyStep(StepLogits(sampled, chunks))

    def execute(self, sched_out: Any) -> StepLogits:
        return self.launch(sched_out).rows()

    def stats(self) -> dict[str, int]:
        return {**self.inner.stats(), "forced_forwards": self.forced_forwards,
                "forced_cold_forwards": self.cold_forwards}  # fmt: skip

    def _row(self, f: ForcedPass, position: int) -> np.ndarray:
        """Position's row: from the forced pass while the history is the logged one there,
        else a cold forward over the actual history."""
        if position < f.matched and position >= f.first_row:
            while f.done <= position:
                self._next_chunk(f)
            if position in f.rows:
                return f.rows[position]
        self.cold_forwards += 1
        return cold_logits(self.deployment, f.history[: position + 1])

    def _next_chunk(self, f: ForcedPass) -> None:
        """Forward positions [done, done + chunk) of the logged tokens on the pass's cache;
        keep the rows from `first_row` on (the previous chunk's are dropped)."""
        lo = f.done
        hi = min(lo + self.chunk, len(f.token_ids))
        wanted = np.arange(max(lo, f.first_row), hi) - lo
        keep = wanted if wanted.size else np.array([hi - lo - 1])
        table = tuple(range(-(-len(f.token_ids) // BLOCK)))
        req = ScheduledRequest("forced", f.token_ids[lo:hi], lo, table, sample=True)
        device = self.model.ops.device
        batch = build_flat_batch([req], BLOCK, device)
        batch = dataclasses.replace(batch, logits_indices=torch.as_tensor(keep, device=device))
        logits = self.model.forward(batch, f.kv).float().cpu().numpy()
        self.forced_forwards += 1
        f.rows = {lo + int(j): logits[i] for i, j in enumerate(wanted)}
        f.done = hi


def forced_unsupported(engine: Any) -> str | None:
    """Why `engine` cannot replay teacher-forced (None: it can): only an invariant plan's
    rows are chunk-invariant, and the forced pass runs on one process's model."""
    plan = getattr(getattr(engine, "deployment", None), "plan", None)
    if plan is None or not isinstance(getattr(engine, "runner", None), ModelRunner):
        return "the engine has no single-process model runner (tensor parallel?)"
    if plan.name == "fast":
        return "the fast plan's rows depend on the chunking"
    return None


class ForcedReplayEngine:
    """The `ReplayEngine` of a teacher-forced verification: an `LLMEngine` whose runner is
    a `ForcedRowsRunner` (`expect` before a replay, `forget` after it)."""

    def __init__(self, engine: Any, chunk: int = CHUNK) -> None:
        self.engine = engine
        self.runner = ForcedRowsRunner(engine.runner, engine.deployment, chunk)
        engine.runner = self.runner
        self.fingerprint: str = engine.fingerprint
        self.numerics_id: str = str(getattr(engine, "numerics_id", "") or "")
        self.tokenizer = engine.tokenizer

    def expect(self, request_id: str, prompt: Sequence[int], tokens: Sequence[int],
               prompt_logprobs: bool) -> None:  # fmt: skip
        first = 0 if prompt_logprobs else len(prompt) - 1
        self.runner.expect(request_id, [*prompt, *tokens], first)

    def forget(self, request_id: str) -> None:
        self.runner.forget(request_id)

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: Any) -> None:
        self.engine.add_request(request_id, prompt_token_ids, params)

    def step(self) -> list[Any]:
        return self.engine.step()

    def has_unfinished_requests(self) -> bool:
        return bool(self.engine.has_unfinished_requests())

    def abort_request(self, request_id: str) -> None:
        self.engine.abort_request(request_id)
