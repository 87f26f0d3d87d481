"""The engine's one background thread, and what it sends back to the event loop.

`EngineLoop` owns the engine: only its thread calls `add_request`, `step` and
`abort_request`. Callers post commands through a thread-safe queue; for each engine request
the thread calls the request's `sink` with, in order, `Accepted` (or `Rejected` if
`add_request` raised), then one `Delta` per step in which the request advanced, the last
with `finish_reason` set, or `Failed` if an exception ended it. Deltas are immutable
snapshots computed in the thread, so the event loop never reads engine objects.

Requests are added with `output_kind=RequestOutputKind.DELTA`: each engine output holds only
the new positions, so a step costs O(new tokens) here and in the event loop, however long
the request has run (`benchmarks/streaming.py`). The deltas of a request, concatenated, are
its cumulative output bit for bit (tokens, text, digests, logprobs).

Failure isolation: an exception from `step()` that carries a `request_id` attribute fails
and aborts that request only; any other exception from `step()` fails and aborts every
request in the engine, and the loop keeps serving new requests.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from samebits.outputs import RequestOutputKind
from samebits.sampling import SamplingParams

logger = logging.getLogger("samebits.server")


@dataclass(frozen=True)
class Accepted:
    """The engine took the request."""


@dataclass(frozen=True)
class Rejected:
    """`add_request` raised (a ValueError means bad input)."""

    error: Exception


@dataclass(frozen=True)
class Failed:
    """The request died inside the engine."""

    error: Exception


@dataclass(frozen=True)
class Delta:
    """What a request produced since its previous delta: the new tokens, their digests and
    logprobs, and `text`, the text added (possibly empty: a multi-byte character or a
    possible stop string is held back until resolved). `prompt_logprobs` (prompt logprobs
    asked) comes once, on the request's first delta."""

    token_ids: tuple[int, ...]
    logits_digests: tuple[str, ...]
    logprobs: tuple[dict[int, float], ...] | None
    text: str
    finish_reason: str | None
    seed: int
    prompt_logprobs: tuple[dict[int, float] | None, ...] | None = None


Event = Accepted | Rejected | Failed | Delta
Sink = Callable[[Event], None]


@dataclass(frozen=True)
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    prompt: str | None
    sink: Sink


@dataclass(frozen=True)
class _Abort:
    request_id: str


_STOP = object()


@dataclass
class _Live:
    sink: Sink


class EngineLoop:
    """Runs `engine.step()` in one thread while any request is unfinished.

    `on_step(batch_size)` (optional) is called in the thread after each step (metrics), with
    the engine's `last_batch_size` (requests scheduled) when it has one, else the number of
    outputs.
    """

    def __init__(self, engine: Any, on_step: Callable[[int], None] | None = None) -> None:
        self.engine = engine
        self._on_step = on_step
        self._commands: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._live: dict[str, _Live] = {}
        self._thread = threading.Thread(target=self._run, name="samebits-engine", daemon=True)
        self._stopped = threading.Event()

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float | None = 30.0) -> None:
        """Abort every live request and end the thread."""
        self._commands.put(_STOP)
        self._thread.join(timeout)

    @property
    def alive(self) -> bool:
        """True while the thread runs and accepts requests."""
        return self._thread.is_alive() and not self._stopped.is_set()

    @property
    def num_live(self) -> int:
        return len(self._live)

    def add(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams,
        prompt: str | None, sink: Sink,
    ) -> None:  # fmt: skip
        """Queue a new engine request; its events go to `sink` (called from the thread)."""
        self._commands.put(_Add(request_id, list(prompt_token_ids), params, prompt, sink))

    def abort(self, request_id: str) -> None:
        """Queue an abort; unknown or finished ids are ignored."""
        self._commands.put(_Abort(request_id))

    def _run(self) -> None:
        reason = "the server is shutting down"
        try:
            while True:
                idle = not self.engine.has_unfinished_requests()
                if not self._drain(block=idle):
                    break
                if self.engine.has_unfinished_requests():
                    self._step()
        except Exception as exc:  # the loop itself broke (logged): fail everyone, then stop
            logger.exception("the engine loop stopped")
            reason = f"the engine loop stopped: {exc!r}"
        finally:
            self._stopped.set()
            for request_id in list(self._live):
                self._fail(request_id, RuntimeError(reason))

    def _drain(self, block: bool) -> bool:
        """Apply queued commands; False once asked to stop."""
        try:
            command = self._commands.get(block=block)
        except queue.Empty:
            return True
        while True:
            if command is _STOP:
                return False
            self._apply(command)
            try:
                command = self._commands.get_nowait()
            except queue.Empty:
                return True

    def _apply(self, command: _Add | _Abort) -> None:
        if isinstance(command, _Abort):
            if self._live.pop(command.request_id, None) is not None:
                self._safe_abort(command.request_id)
            return
        try:
            self.engine.add_request(
                command.request_id, command.prompt_token_ids, command.params,
                prompt=command.prompt, output_kind=RequestOutputKind.DELTA,
            )  # fmt: skip
        except Exception as exc:
            _deliver(command.sink, Rejected(exc))
            return
        self._live[command.request_id] = _Live(command.sink)
        _deliver(command.sink, Accepted())

    def _step(self) -> None:
        try:
            outputs = self.engine.step()
        except Exception as exc:
            self._handle_step_error(exc)
            return
        for output in outputs:
            self._emit(output)
        for request_id, exc in self.engine.pop_failures().items():
            if request_id in self._live:
                self._fail(request_id, exc)
        if self._on_step is not None:
            self._on_step(int(getattr(self.engine, "last_batch_size", len(outputs))))

    def _emit(self, output: Any) -> None:
        live = self._live.get(output.request_id)
        if live is None:
            return
        delta = _delta(output.outputs[0], getattr(output, "prompt_logprobs", None))
        if delta.finish_reason is not None:
            del self._live[output.request_id]
        _deliver(live.sink, delta)

    def _handle_step_error(self, exc: Exception) -> None:
        request_id = getattr(exc, "request_id", None)
        if request_id in self._live:
            logger.exception("engine step failed for request %s", request_id)
            self._fail(request_id, exc)
            return
        logger.exception("engine step failed; failing all %d live requests", len(self._live))
        for live_id in list(self._live):
            self._fail(live_id, exc)

    def _fail(self, request_id: str, exc: Exception) -> None:
        live = self._live.pop(request_id)
        self._safe_abort(request_id)
        _deliver(live.sink, Failed(exc))

    def _safe_abort(self, request_id: str) -> None:
        try:
            self.engine.abort_request(request_id)
        except Exception:
            logger.exception("abort_request(%s) failed", request_id)


def _delta(choice: Any, prompt_logprobs: Any = None) -> Delta:
    """An immutable `Delta` of one DELTA engine output (O(its new positions))."""
    logprobs = None
    if choice.logprobs is not None:
        logprobs = tuple(dict(lp) for lp in choice.logprobs)
    if prompt_logprobs is not None:
        prompt_logprobs = tuple(None if lp is None else dict(lp) for lp in prompt_logprobs)
    return Delta(
        token_ids=tuple(int(t) for t in choice.token_ids),
        logits_digests=tuple(str(d) for d in choice.logits_digests),
        logprobs=logprobs,
        text=str(choice.text),
        finish_reason=choice.finish_reason,
        seed=int(choice.seed),
        prompt_logprobs=prompt_logprobs,
    )


def _deliver(sink: Sink, event: Event) -> None:
    try:
        sink(event)
    except Exception:  # e.g. the event loop is closed: the listener is gone
        logger.debug("dropping an event for a closed listener", exc_info=True)
