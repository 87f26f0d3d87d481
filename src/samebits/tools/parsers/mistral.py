"""Mistral calls, after any text, in either of Mistral's two formats:

- v3 (Mistral 7B v0.3, Mixtral, Nemo): `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`;
- v11+ (Mistral Small 3.2, Magistral): `[TOOL_CALLS]name[ARGS]{...}` per call.

`[TOOL_CALLS]` (and `[ARGS]`) are special tokens in those tokenizers, so the output is
decoded with special tokens kept. Text before the first marker is content; if what follows
it is not calls in one of the formats (and nothing else but whitespace), the whole output is
content. A forced output uses v11 when the tokenizer has `[ARGS]` as a special token, else v3.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from samebits.tools.calls import ParsedOutput, ToolCall, call_from_object, content_or_none
from samebits.tools.grammar import arguments_rule, literal, tag
from samebits.tools.parsers.base import ToolParser, held_prefix_end
from samebits.tools.spec import Tool

MARKER, ARGS = "[TOOL_CALLS]", "[ARGS]"
ARG_KEYS = ("arguments", "parameters")


class MistralParser(ToolParser):
    name = "mistral"
    markers = (MARKER, ARGS)
    needs_special_tokens = True

    def parse(self, text: str) -> ParsedOutput:
        at = text.find(MARKER)
        if at < 0:
            return ParsedOutput.text(text)
        rest = text[at + len(MARKER) :]
        calls = _array_calls(rest) if rest.lstrip().startswith("[") else _v11_calls(rest)
        if not calls:
            return ParsedOutput.text(text)
        return ParsedOutput(content_or_none(text[:at]), calls)

    def content_end(self, text: str) -> int:
        return held_prefix_end(text, MARKER)

    def call_rule(self, tool: Tool, tags: Mapping[str, int]) -> str:
        if ARGS in tags:
            name = literal(tool.name)
            return f"{tag(MARKER, tags)} {name} {tag(ARGS, tags)} {arguments_rule(tool)}"
        head = literal('{"name": ' + json.dumps(tool.name) + ', "arguments": ')
        return f"{head} {arguments_rule(tool)} {literal('}')}"

    def calls_rule(self, parallel: bool, tags: Mapping[str, int]) -> str:
        if ARGS in tags:
            return "call+" if parallel else "call"
        more = ' (", " call)*' if parallel else ""
        return f'{tag(MARKER, tags)} "[" call{more} "]"'


def _array_calls(rest: str) -> tuple[ToolCall, ...]:
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


def _v11_calls(rest: str) -> tuple[ToolCall, ...]:
    calls = []
    for piece in rest.split(MARKER):
        name, sep, args = piece.partition(ARGS)
        if not sep:
            return ()
        try:
            value, end = json.JSONDecoder().raw_decode(args.lstrip())
        except json.JSONDecodeError:
            return ()
        call = call_from_object({"name": name.strip(), "arguments": value})
        if call is None or args.lstrip()[end:].strip():
            return ()
        calls.append(call)
    return tuple(calls)
