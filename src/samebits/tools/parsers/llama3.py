"""Llama 3.x JSON calls (`llama3_json`): the output is one or more
`{"name": ..., "parameters": {...}}` objects separated by `;`, optionally after
`<|python_tag|>`. An output whose first object is not a call (text first, bad JSON, an object
that is not a call) is all content; text after the calls that is not one more call is
content (a call, once its head is read, is sent and stays a call).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from samebits.tools.calls import Scan
from samebits.tools.grammar import arguments_rule, literal
from samebits.tools.parsers.base import ToolParser
from samebits.tools.scan import MORE, NO, Reading, read_call_object, read_literal, skip_ws
from samebits.tools.spec import Tool

PYTHON_TAG = "<|python_tag|>"
ARG_KEYS = ("parameters", "arguments")
SEPARATOR = "; "


class Llama3JsonParser(ToolParser):
    name = "llama3_json"
    markers = (PYTHON_TAG,)

    def scan(self, text: str, final: bool) -> Scan:
        out = Reading(text, final)
        start = skip_ws(text, 0)
        tag_end = read_literal(text, start, PYTHON_TAG)
        if tag_end == MORE:
            out.content(0, len(text) if final else 0)
            return out.result()
        _calls(out, start if tag_end == NO else tag_end)
        return out.result()

    def call_rule(self, tool: Tool, tags: Mapping[str, int]) -> str:
        head = literal('{"name": ' + json.dumps(tool.name) + ', "parameters": ')
        return f"{head} {arguments_rule(tool)} {literal('}')}"

    def calls_rule(self, parallel: bool, tags: Mapping[str, int]) -> str:
        return f"call ({literal(SEPARATOR)} call)*" if parallel else "call"


def _calls(out: Reading, pos: int) -> None:
    """The calls from `pos` on, then what follows them as content (the whole text if no
    call came first); a partial output holds what may still be a call."""
    text, after = out.text, 0  # where the text after the last call starts
    while True:
        end, called = read_call_object(out, skip_ws(text, pos), ARG_KEYS)
        if end == MORE and (called or not out.final):
            return
        if end < 0:
            break
        after = end
        pos = skip_ws(text, end)
        sep = read_literal(text, pos, ";")
        if sep == MORE and not out.final:
            return
        if sep < 0:
            break
        if skip_ws(text, sep) == len(text) and out.final:
            return  # a last separator is no content
        pos = sep
    out.content(after, len(text))
