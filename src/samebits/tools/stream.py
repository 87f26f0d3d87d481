"""Streaming a tool-calling output as OpenAI's chat chunks carry it: content deltas, and per
call a first delta `(index, name, arguments "")` then argument fragments as the model writes
them. The stream sends what the parser's scan of the partial output settles
(`ToolParser.scan`), and the whole response is the final scan of the same text, so the
stream's pieces join to exactly the whole output's parse (content and every call's
`arguments`, character for character).

Content goes out once it holds non-whitespace (whitespace-only content is no content); a
partial marker (`<tool_c`) is held until the text says whether it starts a call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from samebits.tools.calls import Scan, ToolCall
from samebits.tools.parsers.base import ToolParser

logger = logging.getLogger("samebits.tools")


@dataclass(frozen=True)
class CallDelta:
    """One call's part of a chunk: `name` set on its first delta only (with `arguments`
    ""), then `arguments` fragments."""

    index: int
    name: str | None
    arguments: str


@dataclass(frozen=True)
class StreamPiece:
    """One chunk's worth: `content` text and `calls`, at most one delta per call index."""

    content: str
    calls: tuple[CallDelta, ...] = ()


class ToolCallStream:
    """One choice's stream state. Invariant: the content and calls sent so far are a prefix
    of the parse of any continuation of the text seen. `max_calls` (1 under
    `parallel_tool_calls: false`) drops the calls past it, as the whole response does."""

    def __init__(self, parser: ToolParser, max_calls: int | None = None) -> None:
        self.parser = parser
        self.max_calls = max_calls
        self.sent = Scan("")
        self.content_sent = ""

    @property
    def calls_sent(self) -> tuple[ToolCall, ...]:
        return self.sent.calls

    def update(self, text: str) -> list[StreamPiece]:
        """The new pieces of the partial output `text` (all text so far, extending the
        previous one's): one piece, two when a call starts (its first delta, then the
        arguments it already has)."""
        return self._step(self.parser.scan(text, final=False))

    def finish(self, text: str) -> list[StreamPiece]:
        """The rest of the whole output `text`'s parse."""
        return self._step(self.parser.scan(text, final=True))

    def _step(self, scan: Scan) -> list[StreamPiece]:
        scan = Scan(scan.content, scan.calls[: self.max_calls])
        if not self.sent.is_prefix_of(scan):  # a parser broke its invariant: send nothing
            logger.warning("tool stream: what was sent is not a prefix of the parse")
            return [StreamPiece("")]
        content = scan.content[len(self.content_sent) :] if scan.content.strip() else ""
        self.content_sent += content
        first, then = self._call_deltas(scan.calls)
        self.sent = scan
        pieces = [StreamPiece(content, first)]
        return pieces + [StreamPiece("", then)] if then else pieces

    def _call_deltas(
        self, calls: tuple[ToolCall, ...]
    ) -> tuple[tuple[CallDelta, ...], tuple[CallDelta, ...]]:
        """(fragments of calls already started and first deltas of new ones, the new ones'
        arguments so far)."""
        first, then = [], []
        for index, call in enumerate(calls):
            if index < len(self.sent.calls):
                fragment = call.arguments[len(self.sent.calls[index].arguments) :]
                first += [CallDelta(index, None, fragment)] if fragment else []
                continue
            first.append(CallDelta(index, call.name, ""))
            then += [CallDelta(index, None, call.arguments)] if call.arguments else []
        return tuple(first), tuple(then)
