"""Mistral calls, after any text, in either of Mistral's two formats:

- v3 (Mistral 7B v0.3, Mixtral, Nemo): `[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]`;
- v11+ (Mistral Small 3.2, Magistral): `[TOOL_CALLS]name[ARGS]{...}` per call.

`[TOOL_CALLS]` (and `[ARGS]`) are special tokens in those tokenizers, so the output is
decoded with special tokens kept. Text before the first marker is content; if what follows
it is not a call in one of the formats, the whole output is content; text after the calls
that is not one more call is content (a call, once its head is read, is sent and stays a
call). A forced output uses v11 when the tokenizer has `[ARGS]` as a special token, else v3.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from samebits.tools.calls import Scan
from samebits.tools.grammar import arguments_rule, literal, tag
from samebits.tools.parsers.base import ToolParser, held_prefix_end
from samebits.tools.scan import (
    MORE,
    Reading,
    read_call_object,
    read_literal,
    read_one_of,
    skip_ws,
    value_end,
)
from samebits.tools.spec import Tool

MARKER, ARGS = "[TOOL_CALLS]", "[ARGS]"
ARG_KEYS = ("arguments", "parameters")


class MistralParser(ToolParser):
    name = "mistral"
    markers = (MARKER, ARGS)
    needs_special_tokens = True

    def scan(self, text: str, final: bool) -> Scan:
        out = Reading(text, final)
        at = text.find(MARKER)
        if at < 0:
            out.content(0, len(text) if final else held_prefix_end(text, MARKER))
            return out.result()
        out.content(0, at)
        pos = skip_ws(text, at + len(MARKER))
        after = _array(out, pos + 1, at) if text.startswith("[", pos) else _v11(out, at)
        if after >= 0:  # else the scan ended inside the calls
            out.content(after, len(text))
        return out.result()

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


def _array(out: Reading, pos: int, after: int) -> int:
    """The v3 array's calls from `pos` on: where the text after them starts (`after` if
    none came), or `MORE` when the scan ends inside (held, or an open call)."""
    text = out.text
    while True:
        end, called = read_call_object(out, skip_ws(text, pos), ARG_KEYS)
        if end == MORE and (called or not out.final):
            return MORE
        if end < 0:
            return after
        after, pos = end, skip_ws(text, end)
        sep = read_one_of(text, pos, (",", "]"))
        if sep == MORE and not out.final:
            return MORE
        if sep < 0 or text[pos] == "]":
            return max(after, sep)
        pos = sep


def _v11(out: Reading, at: int) -> int:
    """The v11 calls `[TOOL_CALLS]name[ARGS]{...}` from the marker at `at` on: as `_array`."""
    text, after, pos = out.text, at, at
    while True:
        args_at = text.find(ARGS, pos + len(MARKER))
        name = text[pos + len(MARKER) : max(args_at, 0)].strip()
        start = skip_ws(text, args_at + len(ARGS)) if args_at >= 0 else len(text)
        if start == len(text):
            return after if out.final else MORE
        if not name or MARKER in name or text[start] != "{":
            return after
        args_end = value_end(text, start)
        out.call(name, start, args_end)
        if args_end < 0:
            return MORE
        after, pos = args_end, skip_ws(text, args_end)
        found = read_literal(text, pos, MARKER)
        if found == MORE and not out.final:
            return MORE
        if found < 0:
            return after
