"""A request's `tools` and `tool_choice`, checked and normalized (OpenAI's shapes).

`parse_tools` turns the `tools` list into `Tool`s: each `{"type": "function", "function":
{"name", "description"?, "parameters"?, "strict"?}}`, names matching OpenAI's
`^[a-zA-Z0-9_-]{1,64}$` and distinct, `parameters` a JSON schema object (default: any
object). `parse_tool_choice` gives the `ToolChoice`: mode "none", "auto", "required" or
"named" (one function). Every problem is a `ToolSpecError` naming the request field.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MODES = ("none", "auto", "required")
ANY_OBJECT = '{"type":"object"}'


class ToolSpecError(ValueError):
    """A malformed `tools` / `tool_choice`; `param` is the request field to blame."""

    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Tool:
    """One function the model may call. `parameters` is compact JSON text of its schema
    (key order kept), so equal tools compare equal and serialize the same."""

    name: str
    description: str | None
    parameters: str

    def to_openai(self) -> dict[str, Any]:
        """The tool as the chat template (and the audit log) sees it."""
        function: dict[str, Any] = {"name": self.name}
        if self.description is not None:
            function["description"] = self.description
        function["parameters"] = json.loads(self.parameters)
        return {"type": "function", "function": function}


@dataclass(frozen=True)
class ToolChoice:
    """`mode` one of "none", "auto", "required", "named"; `name` set iff mode is "named"."""

    mode: str
    name: str | None = None

    @property
    def forced(self) -> bool:
        """Whether the output must be tool calls (enforced by a grammar)."""
        return self.mode in ("required", "named")

    def to_openai(self) -> str | dict[str, Any]:
        if self.name is None:
            return self.mode
        return {"type": "function", "function": {"name": self.name}}


def parse_tools(raw: Any) -> tuple[Tool, ...]:
    """The request's `tools` (None or [] gives ())."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ToolSpecError(f"'tools' must be a list, got {type(raw).__name__}", "tools")
    tools = tuple(_tool(i, item) for i, item in enumerate(raw))
    names = [t.name for t in tools]
    for name in names:
        if names.count(name) > 1:
            raise ToolSpecError(f"'tools' has the function name {name!r} twice", "tools")
    return tools


def _tool(index: int, item: Any) -> Tool:
    where = f"tools[{index}]"
    if not isinstance(item, dict) or item.get("type") != "function":
        raise ToolSpecError(f"{where} must be {{'type': 'function', 'function': {{...}}}}", "tools")
    function = item.get("function")
    if not isinstance(function, dict):
        raise ToolSpecError(f"{where}.function must be an object with a 'name'", "tools")
    name = function.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ToolSpecError(
            f"{where}.function.name must match ^[a-zA-Z0-9_-]{{1,64}}$, got {name!r:.80}", "tools"
        )
    description = function.get("description")
    if description is not None and not isinstance(description, str):
        raise ToolSpecError(f"{where}.function.description must be a string", "tools")
    return Tool(name, description, _parameters(where, function.get("parameters")))


def _parameters(where: str, schema: Any) -> str:
    if schema is None:
        return ANY_OBJECT
    if not isinstance(schema, dict):
        raise ToolSpecError(
            f"{where}.function.parameters must be a JSON schema object, got "
            f"{type(schema).__name__}",
            "tools",
        )
    if schema.get("type", "object") != "object":
        raise ToolSpecError(
            f"{where}.function.parameters must describe an object (type 'object'), got type "
            f"{schema.get('type')!r:.40}",
            "tools",
        )
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def parse_tool_choice(raw: Any, tools: tuple[Tool, ...]) -> ToolChoice:
    """The request's `tool_choice` (absent: "auto" with tools, "none" without)."""
    if raw is None:
        return ToolChoice("auto" if tools else "none")
    choice = _choice(raw)
    if choice.forced and not tools:
        raise ToolSpecError(f"tool_choice {_shown(raw)} needs 'tools'", "tool_choice")
    if choice.name is not None and choice.name not in {t.name for t in tools}:
        raise ToolSpecError(
            f"tool_choice names the function {choice.name!r}, which is not in 'tools' "
            f"({', '.join(t.name for t in tools)})",
            "tool_choice",
        )
    return choice


def _choice(raw: Any) -> ToolChoice:
    if isinstance(raw, str):
        if raw not in MODES:
            raise ToolSpecError(
                f"tool_choice must be one of {', '.join(MODES)} or a function, got {raw!r:.40}",
                "tool_choice",
            )
        return ToolChoice(raw)
    name = _named(raw)
    if name is None:
        raise ToolSpecError(
            "tool_choice must be 'none', 'auto', 'required' or "
            "{'type': 'function', 'function': {'name': ...}}",
            "tool_choice",
        )
    return ToolChoice("named", name)


def _named(raw: Any) -> str | None:
    if not isinstance(raw, dict) or raw.get("type") != "function":
        return None
    function = raw.get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) and name else None


def _shown(raw: Any) -> str:
    return repr(raw) if isinstance(raw, str) else json.dumps(raw)[:80]
