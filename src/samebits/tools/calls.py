"""A parsed tool call, a parsed model output (text outside the calls, the calls) and a scan
of a partial output (what a stream may already send)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One call: the function `name` and its `arguments`, the model's own text of the
    arguments object (so a streamed call and a whole one carry the same string; a call
    whose head the parsers read only whole has them re-serialized, see `call_from_object`).
    The text is the model's: JSON when the output was forced, else as written."""

    name: str
    arguments: str

    def to_openai(self, call_id: str) -> dict[str, Any]:
        """The OpenAI `tool_calls` item of this call."""
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class ParsedOutput:
    """A model output split into `content` (text outside the calls; None when that text is
    empty or only whitespace) and `calls`, in the order the model wrote them."""

    content: str | None
    calls: tuple[ToolCall, ...] = ()

    @classmethod
    def text(cls, text: str) -> ParsedOutput:
        """An output with no call: all of `text` is content."""
        return cls(content_or_none(text), ())


@dataclass(frozen=True)
class Scan:
    """What a parser read of a partial (or, `final`, whole) output: `content` (the text
    outside the calls settled so far; may be whitespace) and `calls`, the last one's
    arguments still growing while the output is partial. Invariant (the stream's): the scan
    of a text is a prefix of the scan of any extension of it (`is_prefix_of`)."""

    content: str
    calls: tuple[ToolCall, ...] = ()

    def parsed(self) -> ParsedOutput:
        return ParsedOutput(content_or_none(self.content), self.calls)

    def is_prefix_of(self, other: Scan) -> bool:
        """Same calls but the last, whose arguments `other` may extend, and content that
        `other` extends."""
        n = len(self.calls)
        if not other.content.startswith(self.content) or len(other.calls) < n:
            return False
        if n == 0:
            return True
        if self.calls[: n - 1] != other.calls[: n - 1]:
            return False
        last, then = self.calls[-1], other.calls[n - 1]
        return last.name == then.name and then.arguments.startswith(last.arguments)


def content_or_none(text: str) -> str | None:
    return text if text.strip() else None


def call_from_object(obj: Any, args_keys: tuple[str, ...] = ("arguments",)) -> ToolCall | None:
    """A call from a decoded JSON object `{"name": str, <args key>: object}`; None if it is
    not one. The arguments are re-serialized (`json.dumps`, its default separators)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    key = next((k for k in args_keys if k in obj), None)
    args = {} if key is None else obj[key]
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return ToolCall(obj["name"], json.dumps(args, ensure_ascii=False))
