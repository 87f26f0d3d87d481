"""Mistral calls: `[TOOL_CALLS]` then a JSON list of `{"name": ..., "arguments": {...}}`
(v3 tokenizers: `[TOOL_CALLS]` is a special token, so the output is decoded with special
tokens kept). Text before the marker is content; if what follows it is not such a list
(and nothing else but whitespace), the whole output is content.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from samebits.tools.calls import ParsedOutput, ToolCall, call_from_object, content_or_none
from samebits.tools.grammar import arguments_rule, literal, tag
from samebits.tools.parsers.base import ToolParser, held_prefix_end
from samebits.tools.spec import Tool

MARKER = "[TOOL_CALLS]"
ARG_KEYS = ("arguments", "parameters")


class MistralParser(ToolParser):
    name = "mistral"
    markers = (MARKER,)
    needs_special_tokens = True

    def parse(self, text: str) -> ParsedOutput:
        at = text.find(MARKER)
        if at < 0:
            return ParsedOutput.text(text)
        calls = _calls(text[at + len(MARKER) :])
        if not calls:
            return ParsedOutput.text(text)
        return ParsedOutput(content_or_none(text[:at]), calls)

    def content_end(self, text: str) -> int:
        return held_prefix_end(text, MARKER)

    def call_rule(self, tool: Tool, tags: Mapping[str, int]) -> str:
        head = literal('{"name": ' + json.dumps(tool.name) + ', "arguments": ')
        return f"{head} {arguments_rule(tool)} {literal('}')}"

    def calls_rule(self, parallel: bool, tags: Mapping[str, int]) -> str:
        more = ' (", " call)*' if parallel else ""
        return f'{tag(MARKER, tags)} "[" call{more} "]"'


def _calls(rest: str) -> tuple[ToolCall, ...]:
    try:
        items, end = json.JSONDecoder().raw_decode(rest.lstrip())
    except json.JSONDecodeError:
        return ()
    if rest.lstrip()[end:].strip() or not isinstance(items, list):
        return ()
    calls = [call_from_object(item, ARG_KEYS) for item in items]
    if not calls or any(c is None for c in calls):
        return ()
    return tuple(c for c in calls if c is not None)
