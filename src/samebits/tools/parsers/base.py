"""What every tool-call parser offers: a scan of a partial or whole output (the stream and
the whole response read the same scan) and its grammar pieces (see
`samebits.tools.grammar`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping

from samebits.tools.calls import ParsedOutput, Scan
from samebits.tools.spec import Tool


class ToolParser(ABC):
    """A wire format. Invariant the stream relies on, for any text `t` and extension `t + s`:
    `scan(t, final=False)` is a prefix of `scan(t + s, final)` (`Scan.is_prefix_of`): content
    is sent once no continuation can make it part of a call, a call once its head (the
    name, then the start of an arguments object) is read, and its arguments as they come."""

    name: str = ""
    markers: tuple[str, ...] = ()  # text that may be one special token (grammar, decoding)
    needs_special_tokens: bool = False  # its marker is a special token decoding would drop

    @abstractmethod
    def scan(self, text: str, final: bool) -> Scan:
        """What the output `text` settles (`final`: the whole output; text that never
        became a call is content then)."""

    def parse(self, text: str) -> ParsedOutput:
        """The content and calls of a whole output; malformed calls stay text."""
        return self.scan(text, final=True).parsed()

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
