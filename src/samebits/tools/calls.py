"""A parsed tool call and a parsed model output (text outside the calls, the calls)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ToolCall:
    """One call: the function `name` and its `arguments` as JSON text of an object (the
    model's own spelling, so a streamed call and a whole one carry the same string)."""

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


def content_or_none(text: str) -> str | None:
    return text if text.strip() else None


def call_from_object(obj: Any, args_keys: tuple[str, ...] = ("arguments",)) -> ToolCall | None:
    """A call from a decoded JSON object `{"name": str, <args key>: object}`; None if it is
    not one. The arguments are re-serialized compactly only when given as a dict value."""
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
