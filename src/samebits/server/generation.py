"""The engine requests behind one API call, seen from the event loop.

`Generation` submits one engine request per choice to the `EngineLoop`, waits until the
engine accepted all of them (a rejection aborts the others and becomes an APIError), then
yields `(choice index, Delta)` pairs as the engine thread produces them. `client_gone()`
aborts every unfinished choice and ends the iteration with `ClientGone`.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial

from samebits.sampling import SamplingParams
from samebits.server.engine_loop import Accepted, Delta, EngineLoop, Event, Failed, Rejected
from samebits.server.errors import APIError, bad_request
from samebits.server.prompts import Prompt
from samebits.server.tools import ToolPlan
from samebits.tools.stream import ToolCallStream


class ClientGone(Exception):
    """The client disconnected; unfinished choices were aborted."""


_GONE = object()


@dataclass
class Choice:
    """One engine request of an API call and everything it produced so far.

    `token_ids`, `logits_digests`, `logprobs` and `text` are what the engine produced (and
    what the audit log records); `shown_*` is what the response carries: nothing for a
    `scoring_only` choice (max_tokens 0 with echo, run as one engine token). `echo` puts the
    prompt (text, and `prompt_logprobs` when asked) before the output in the response.
    `tools` (a chat call's `ToolPlan` whose parser is set) makes the response parse `text`
    into content and tool calls.
    """

    index: int
    request_id: str
    prompt: Prompt
    params: SamplingParams
    echo: bool = False
    scoring_only: bool = False
    prompt_logprobs: list[dict[int, float] | None] | None = None
    echo_sent: bool = False  # streaming: the prompt went out in a chunk already
    token_ids: list[int] = field(default_factory=list)
    logits_digests: list[str] = field(default_factory=list)
    logprobs: list[dict[int, float]] | None = None
    text: str = ""
    finish_reason: str | None = None
    accepted: bool = False
    recorded: bool = False
    tools: ToolPlan | None = None  # chat with tools: parse the output into tool calls
    tool_stream: ToolCallStream | None = None  # streaming: the calls and content sent so far

    @property
    def seed(self) -> int:
        assert self.params.seed is not None
        return self.params.seed

    @property
    def shown_token_ids(self) -> list[int]:
        return [] if self.scoring_only else self.token_ids

    @property
    def shown_text(self) -> str:
        return "" if self.scoring_only else self.text

    @property
    def shown_logprobs(self) -> list[dict[int, float]] | None:
        if self.logprobs is None:
            return None
        return [] if self.scoring_only else self.logprobs

    @property
    def shown_digests(self) -> list[str]:
        return [] if self.scoring_only else self.logits_digests

    @property
    def shown_finish_reason(self) -> str | None:
        if self.scoring_only and self.finish_reason not in (None, "abort"):
            return "length"  # nothing was generated: max_tokens (0) reached
        return self.finish_reason

    def apply(self, delta: Delta) -> str:
        """Fold `delta` in (appending: O(its new positions)); return the text it adds."""
        if delta.prompt_logprobs is not None:
            self.prompt_logprobs = list(delta.prompt_logprobs)
        self.token_ids.extend(delta.token_ids)
        self.logits_digests.extend(delta.logits_digests)
        if delta.logprobs is not None:
            if self.logprobs is None:
                self.logprobs = []
            self.logprobs.extend(delta.logprobs)
        self.text += delta.text
        self.finish_reason = delta.finish_reason
        return delta.text


class Generation:
    """Choices of one API call. Create and use inside the event loop."""

    def __init__(self, engine_loop: EngineLoop, choices: list[Choice]) -> None:
        self.engine_loop = engine_loop
        self.choices = choices
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self._buffered: list[tuple[int, Event]] = []
        self._gone = False
        self.settled = False  # set once the API has aborted / recorded / counted this call

    @property
    def finished(self) -> bool:
        return all(c.finish_reason is not None for c in self.choices)

    async def start(self) -> None:
        """Submit every choice; raise APIError if the engine rejects one."""
        if not self.engine_loop.alive:
            raise APIError(503, "the engine is not running", None, "engine_stopped")
        for choice in self.choices:
            sink = partial(self._post, choice.index)
            self.engine_loop.add(
                choice.request_id, list(choice.prompt.token_ids), choice.params,
                choice.prompt.text, sink,
            )  # fmt: skip
        rejection: Exception | None = None
        for _ in self.choices:
            index, event = await self._next_ack()
            if isinstance(event, Rejected):
                rejection = rejection or event.error
            else:
                self.choices[index].accepted = True
        if rejection is not None:
            self.abort()
            raise _rejection_error(rejection)

    async def events(self) -> AsyncIterator[tuple[Choice, str, Delta]]:
        """(choice, added text, delta) until every choice finished.

        Raises ClientGone after `client_gone()`, APIError(500) if a choice failed.
        """
        while True:
            if self._gone:
                raise ClientGone()
            if self.finished:
                return
            item = self._buffered.pop(0) if self._buffered else await self._queue.get()
            if item is _GONE:
                continue
            index, event = item
            choice = self.choices[index]
            if isinstance(event, Failed):
                self.abort()
                raise APIError(500, f"the request failed in the engine: {event.error}")
            if isinstance(event, Delta) and choice.finish_reason is None:
                yield choice, choice.apply(event), event

    def abort(self) -> None:
        """Abort every accepted, unfinished choice (its finish_reason becomes 'abort')."""
        for choice in self.choices:
            if choice.accepted and choice.finish_reason is None:
                self.engine_loop.abort(choice.request_id)
                choice.finish_reason = "abort"

    def client_gone(self) -> None:
        """Called when the client disconnected: abort and wake the consumer."""
        if not self._gone and not self.finished:
            self._gone = True
            self.abort()
            self._queue.put_nowait(_GONE)

    async def _next_ack(self) -> tuple[int, Event]:
        while True:
            index, event = await self._queue.get()
            if isinstance(event, Accepted | Rejected):
                return index, event
            self._buffered.append((index, event))

    def _post(self, index: int, event: Event) -> None:
        """Called from the engine thread."""
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (index, event))


def _rejection_error(error: Exception) -> APIError:
    if isinstance(error, ValueError):
        return bad_request(f"the engine rejected the request: {error}")
    return APIError(500, f"the engine could not take the request: {error}")
