"""Streaming a tool-calling output: which content and which calls a partial output has
settled, so a stream's pieces join to exactly the whole output's parse.

Content goes out as soon as the parser says no continuation can make it part of a call
(and it holds non-whitespace: whitespace-only content is no content); a call goes out
whole, once no continuation can change it (Hermes: its closing tag; the other formats: the
end of the output). At the end, `finish` sends what the whole parse adds.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from samebits.tools.calls import ToolCall
from samebits.tools.parsers.base import ToolParser

logger = logging.getLogger("samebits.tools")


@dataclass(frozen=True)
class StreamPiece:
    """What one step adds: `content` text and `calls` as (index, call)."""

    content: str
    calls: tuple[tuple[int, ToolCall], ...]


class ToolCallStream:
    """One choice's stream state. Invariant: the content and calls sent so far are a
    prefix of the parse of any continuation of the text seen."""

    def __init__(self, parser: ToolParser) -> None:
        self.parser = parser
        self.content_sent = ""
        self.calls_sent: list[ToolCall] = []
        self._seen = 0  # length of the text of the previous update

    def update(self, text: str) -> StreamPiece:
        """The new settled pieces of the partial output `text` (all text so far, extending
        the previous one's)."""
        held = text[: self.parser.content_end(text)]
        content = held[len(self.content_sent) :] if held.strip() else ""
        self.content_sent += content
        calls = self._new_calls(self.parser.early_calls(text)) if self._call_ended(text) else ()
        self._seen = len(text)
        return StreamPiece(content, calls)

    def _call_ended(self, text: str) -> bool:
        """Whether the text added since the last update completes a `call_end` (the
        whole-text parse then runs once per call, not once per token)."""
        end = self.parser.call_end
        return end is not None and end in text[max(0, self._seen - len(end) + 1) :]

    def finish(self, text: str) -> StreamPiece:
        """The rest of the whole output `text`'s parse."""
        parsed = self.parser.parse(text)
        full = parsed.content or ""
        if not full.startswith(self.content_sent):  # a parser broke its invariant
            logger.warning("tool stream: content sent is not a prefix of the parse")
            return StreamPiece("", ())
        content = full[len(self.content_sent) :]
        self.content_sent = full
        return StreamPiece(content, self._new_calls(parsed.calls))

    def _new_calls(self, calls: tuple[ToolCall, ...]) -> tuple[tuple[int, ToolCall], ...]:
        sent = len(self.calls_sent)
        if tuple(calls[:sent]) != tuple(self.calls_sent):
            logger.warning("tool stream: calls sent are not a prefix of the parse")
            return ()
        new = calls[sent:]
        self.calls_sent.extend(new)
        return tuple(enumerate(new, start=sent))
