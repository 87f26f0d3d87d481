"""Llama 3.x JSON calls (`llama3_json`): the whole output is one or more
`{"name": ..., "parameters": {...}}` objects separated by `;`, optionally after
`<|python_tag|>`. Anything else (text first, bad JSON, an object that is not a call) is
plain content: the output is all calls or all text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from samebits.tools.calls import ParsedOutput, ToolCall, call_from_object
from samebits.tools.grammar import arguments_rule, literal
from samebits.tools.parsers.base import ToolParser
from samebits.tools.spec import Tool

PYTHON_TAG = "<|python_tag|>"
ARG_KEYS = ("parameters", "arguments")
SEPARATOR = "; "


class Llama3JsonParser(ToolParser):
    name = "llama3_json"
    markers = (PYTHON_TAG,)

    def parse(self, text: str) -> ParsedOutput:
        calls = _calls(text)
        return ParsedOutput(None, calls) if calls else ParsedOutput.text(text)

    def content_end(self, text: str) -> int:
        head = text.lstrip()
        if not head or head.startswith("{") or PYTHON_TAG.startswith(head[: len(PYTHON_TAG)]):
            return 0  # may become calls: hold everything until the end
        return len(text)

    def call_rule(self, tool: Tool, tags: Mapping[str, int]) -> str:
        head = literal('{"name": ' + json.dumps(tool.name) + ', "parameters": ')
        return f"{head} {arguments_rule(tool)} {literal('}')}"

    def calls_rule(self, parallel: bool, tags: Mapping[str, int]) -> str:
        return f"call ({literal(SEPARATOR)} call)*" if parallel else "call"


def _calls(text: str) -> tuple[ToolCall, ...]:
    rest = text.strip()
    if rest.startswith(PYTHON_TAG):
        rest = rest[len(PYTHON_TAG) :].lstrip()
    decoder, calls = json.JSONDecoder(), []
    while rest:
        try:
            obj, end = decoder.raw_decode(rest)
        except json.JSONDecodeError:
            return ()
        call = call_from_object(obj, ARG_KEYS)
        if call is None:
            return ()
        calls.append(call)
        rest = rest[end:].lstrip()
        if rest.startswith(";"):
            rest = rest[1:].lstrip()
    return tuple(calls)
