"""Lark text (llguidance's dialect) that forces tool calls in a parser's wire format.

A forced call is the format's fixed text around a `%json` rule of the tool's parameter
schema, compact (no whitespace between JSON tokens, so a model cannot spend its budget on
spaces). `call_grammar` is a pure function of the tools, the choice, `parallel` and the tag
ids: the text goes into the request's `StructuredOutputsParams.grammar`, so the audit log
holds it and `samebits verify` rebuilds the same matcher.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from samebits.tools.spec import Tool, ToolChoice

COMPACT = {"whitespace_flexible": False}


class CallFormat(Protocol):
    """What a wire format contributes to its grammar."""

    def call_rule(self, tool: Tool, tags: Mapping[str, int]) -> str: ...

    def calls_rule(self, parallel: bool, tags: Mapping[str, int]) -> str: ...


def call_grammar(
    fmt: CallFormat, tools: Sequence[Tool], choice: ToolChoice, parallel: bool,
    tags: Mapping[str, int],
) -> str:  # fmt: skip
    """The grammar of one call of the allowed tools, or (`parallel` and no named function)
    one or more. A named function is called exactly once (as vLLM and OpenAI do)."""
    allowed = [t for t in tools if choice.name is None or t.name == choice.name]
    if not allowed:
        raise ValueError("call_grammar: no tool is allowed")
    several = parallel and choice.name is None
    lines = ["%llguidance {}", f"start: {fmt.calls_rule(several, tags)}"]
    lines.append("call: " + " | ".join(f"call_{i}" for i in range(len(allowed))))
    lines += [f"call_{i}: {fmt.call_rule(t, tags)}" for i, t in enumerate(allowed)]
    return "\n".join(lines) + "\n"


def literal(text: str) -> str:
    """`text` as a Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def tag(text: str, tags: Mapping[str, int]) -> str:
    """A marker: its special token (`<[id]>`) when it is one, else its text."""
    return f"<[{tags[text]}]>" if text in tags else literal(text)


def arguments_rule(tool: Tool) -> str:
    """`%json` of the tool's parameter schema, compact, an object (a schema without `type`,
    `{}` say, would allow any JSON value)."""
    schema: dict[str, Any] = {"type": "object", **json.loads(tool.parameters)}
    schema["x-guidance"] = {**schema.get("x-guidance", {}), **COMPACT}
    return "%json " + json.dumps(schema, ensure_ascii=False, separators=(",", ":"))


def special_tag_ids(tokenizer: Any, markers: Sequence[str]) -> dict[str, int]:
    """{marker: id} for each marker that is one special token of `tokenizer` (a token that
    decoding with `skip_special_tokens` drops); other markers are spelled as text."""
    out = {}
    for marker in markers:
        ids = tokenizer.encode(marker, add_special_tokens=False)
        if len(ids) == 1 and tokenizer.decode(ids, skip_special_tokens=True) == "":
            out[marker] = int(ids[0])
    return out
