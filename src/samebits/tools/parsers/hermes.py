"""Hermes-style calls (Qwen2.5, Qwen3, Hermes): each call is
`<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, anywhere in the text.

A block whose body is not such an object (bad JSON, no name) stays text, as does an
unclosed `<tool_call>`. Content is the text outside the valid blocks, less the
whitespace-only pieces after a call (the newlines between calls are not content).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from samebits.tools.calls import ParsedOutput, ToolCall, call_from_object, content_or_none
from samebits.tools.grammar import arguments_rule, literal, tag
from samebits.tools.parsers.base import ToolParser, held_prefix_end
from samebits.tools.spec import Tool

OPEN, CLOSE = "<tool_call>", "</tool_call>"
BLOCK = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)
ARG_KEYS = ("arguments", "parameters")


class HermesParser(ToolParser):
    name = "hermes"
    markers = (OPEN, CLOSE)
    call_end = CLOSE

    def parse(self, text: str) -> ParsedOutput:
        outside: list[str] = []
        calls: list[ToolCall] = []
        last = 0
        for match in BLOCK.finditer(text):
            call = _block_call(match.group(1))
            if call is None:
                continue
            _keep(outside, text[last : match.start()], after_call=bool(calls))
            calls.append(call)
            last = match.end()
        _keep(outside, text[last:], after_call=bool(calls))
        return ParsedOutput(content_or_none("".join(outside)), tuple(calls))

    def content_end(self, text: str) -> int:
        return held_prefix_end(text, OPEN)

    def early_calls(self, text: str) -> tuple[ToolCall, ...]:
        return self.parse(text).calls  # a closed block is final: matching is left to right

    def call_rule(self, tool: Tool, tags: Mapping[str, int]) -> str:
        head = literal('\n{"name": ' + json.dumps(tool.name) + ', "arguments": ')
        tail = literal("}\n")
        return f"{tag(OPEN, tags)} {head} {arguments_rule(tool)} {tail} {tag(CLOSE, tags)}"

    def calls_rule(self, parallel: bool, tags: Mapping[str, int]) -> str:
        return 'call ("\\n" call)*' if parallel else "call"


def _keep(outside: list[str], piece: str, after_call: bool) -> None:
    if piece.strip() or not after_call:
        outside.append(piece)


def _block_call(body: str) -> ToolCall | None:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    return call_from_object(obj, ARG_KEYS)
