"""Hermes-style calls (Qwen2.5, Qwen3, Hermes): each call is
`<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>`, anywhere in the text.

A block is a call from its head on (`{"name": "<name>", "arguments": {`): its arguments are
the model's text of that object, and the block runs to its `</tool_call>` (or the next
`<tool_call>`, or the end of the output). A block in another shape is read whole at its `</tool_call>`: a call if its body is
a call object, else text, as is an unclosed one. Content is the text outside the calls, less
the whitespace-only pieces after a call (the newlines between calls are not content).
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from samebits.tools.calls import Scan
from samebits.tools.grammar import arguments_rule, literal, tag
from samebits.tools.parsers.base import ToolParser, held_prefix_end
from samebits.tools.scan import NO, Reading, object_call, read_head, value_end
from samebits.tools.spec import Tool

OPEN, CLOSE = "<tool_call>", "</tool_call>"
ARG_KEYS = ("arguments", "parameters")


class HermesParser(ToolParser):
    name = "hermes"
    markers = (OPEN, CLOSE)

    def scan(self, text: str, final: bool) -> Scan:
        out = Reading(text, final)
        pos = piece = 0  # where the next block is looked for; where the content piece starts
        while (at := text.find(OPEN, pos)) >= 0:
            pos, called = _block(out, piece, at)
            if pos < 0:
                return out.result()
            piece = pos if called else piece
        out.content(piece, len(text) if final else pos + held_prefix_end(text[pos:], OPEN))
        return out.result()

    def call_rule(self, tool: Tool, tags: Mapping[str, int]) -> str:
        head = literal('\n{"name": ' + json.dumps(tool.name) + ', "arguments": ')
        tail = literal("}\n")
        return f"{tag(OPEN, tags)} {head} {arguments_rule(tool)} {tail} {tag(CLOSE, tags)}"

    def calls_rule(self, parallel: bool, tags: Mapping[str, int]) -> str:
        return 'call ("\\n" call)*' if parallel else "call"


def _block(out: Reading, piece: int, at: int) -> tuple[int, bool]:
    """The block opening at `at`: (where scanning goes on after it, or -1 when the scan ends
    in it: an open call, a block still undecided; whether it is a call, which closes the
    content piece)."""
    text, head_at = out.text, at + len(OPEN)
    head, name = read_head(text, head_at, ARG_KEYS)
    if head >= 0:
        out.content(piece, at)
        args_end = value_end(text, head)
        out.call(name, head, args_end)
        return _call_end(text, args_end), True
    close = text.find(CLOSE, head_at) if head == NO else -1
    if close < 0:  # undecided, or never closed: held, or text at the end
        out.content(piece, len(text) if out.final else at)
        return -1, False
    call = object_call(text[head_at:close], ARG_KEYS)
    if call is not None:
        out.content(piece, at)
        out.calls.append(call)
    return close + len(CLOSE), call is not None


def _call_end(text: str, args_end: int) -> int:
    """Where a call whose arguments end at `args_end` ends: after its `</tool_call>`, at the
    next `<tool_call>` if that comes first (a missing close), -1 while neither is there."""
    if args_end < 0:
        return -1
    close, reopen = text.find(CLOSE, args_end), text.find(OPEN, args_end)
    if reopen >= 0 and (close < 0 or reopen < close):
        return reopen
    return -1 if close < 0 else close + len(CLOSE)
