"""What every tool-call parser offers: whole-output parsing, the stream's safe points, and
its grammar pieces (see `samebits.tools.grammar`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

from samebits.tools.calls import ParsedOutput, ToolCall
from samebits.tools.spec import Tool


class ToolParser(ABC):
    """A wire format. Invariants the stream relies on, for any text `t` and extension
    `t + s`: `t[:content_end(t)]` is a prefix of `parse(t + s).content or ""` whenever it
    holds non-whitespace, and `early_calls(t)` is a prefix of `parse(t + s).calls`."""

    name: str = ""
    markers: tuple[str, ...] = ()  # text that may be one special token (grammar, decoding)
    needs_special_tokens: bool = False  # its marker is a special token decoding would drop
    call_end: str | None = None  # text ending a call that `early_calls` can settle

    @abstractmethod
    def parse(self, text: str) -> ParsedOutput:
        """The content and calls of a whole output; malformed calls stay text."""

    @abstractmethod
    def content_end(self, text: str) -> int:
        """How much of a partial output is content whatever follows."""

    def early_calls(self, text: str) -> tuple[ToolCall, ...]:
        """Calls of a partial output that no continuation can change (default: none). Only
        called when `call_end` is set, and only when new text holds a `call_end`."""
        return ()

    @abstractmethod
    def call_rule(self, tool: Tool, tags: Mapping[str, int]) -> str:
        """Lark body of one call of `tool`."""

    @abstractmethod
    def calls_rule(self, parallel: bool, tags: Mapping[str, int]) -> str:
        """Lark body of the whole forced output, over the rule `call`."""


def held_prefix_end(text: str, marker: str) -> int:
    """Where content ends in a partial `text` if `marker` starts the calls: at the marker,
    or before a suffix of `text` that could be the marker's start."""
    found = text.find(marker)
    if found >= 0:
        return found
    for size in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-size:]):
            return len(text) - size
    return len(text)
