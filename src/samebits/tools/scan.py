"""Reading a partial model output from the left, one piece at a time.

Each reader takes the text and a position and answers with the position after what it read,
`NO` (the text there is not that piece, whatever follows) or `MORE` (the text ends before
it can tell). An answer other than `MORE` never changes when the text grows: that is what
lets a stream send a call's pieces the moment they are read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from samebits.tools.calls import Scan, ToolCall, call_from_object

NO, MORE = -1, -2
WS = re.compile(r"[ \t\n\r]*")
STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
OPEN_STRING = re.compile(r'"(?:[^"\\]|\\.)*\\?\Z', re.DOTALL)
# a JSON string (closed, or open at the end of the text), a bracket, or a run of the rest
TOKEN = re.compile(r'"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[{}\[\]]|[^"{}\[\]]+', re.DOTALL)
DEPTH = {"{": 1, "[": 1, "}": -1, "]": -1}


def skip_ws(text: str, pos: int) -> int:
    """The position after the JSON whitespace at `pos`."""
    match = WS.match(text, pos)
    return pos if match is None else match.end()


def read_literal(text: str, pos: int, literal: str) -> int:
    """`literal` at `pos`."""
    if text.startswith(literal, pos):
        return pos + len(literal)
    return MORE if literal.startswith(text[pos:]) else NO


def read_one_of(text: str, pos: int, literals: Sequence[str]) -> int:
    """One of `literals` at `pos` (none may be a prefix of another)."""
    ends = [read_literal(text, pos, literal) for literal in literals]
    read = [end for end in ends if end >= 0]
    return read[0] if read else MORE if MORE in ends else NO


def read_string(text: str, pos: int) -> tuple[int, str]:
    """A JSON string at `pos` and its value ("" unless read)."""
    match = STRING.match(text, pos)
    if match is not None:
        try:
            return match.end(), json.loads(match.group())
        except json.JSONDecodeError:  # a bad escape, a raw control character
            return NO, ""
    if pos == len(text) or OPEN_STRING.match(text, pos):
        return MORE, ""
    return NO, ""


def value_end(text: str, start: int) -> int:
    """The end of the bracketed value (object or array) opening at `start`, or `MORE` while
    it is open. Brackets inside strings do not count; nothing else is checked: the text in
    between is the model's, valid JSON or not."""
    depth = 0
    for match in TOKEN.finditer(text, start):
        depth += DEPTH.get(match.group(), 0)
        if depth <= 0:
            return match.end()
    return MORE


def read_head(text: str, pos: int, arg_keys: Sequence[str]) -> tuple[int, str]:
    """A call object's head `{"name": "<name>", "<arguments key>": ` followed by `{`: the
    position of that `{` (where the arguments start) and the name."""
    name = ""
    keys = [json.dumps(key) for key in arg_keys]
    for step in ("{", '"name"', ":", None, ",", keys, ":"):
        pos = skip_ws(text, pos)
        if step is None:
            pos, name = read_string(text, pos)
            pos = NO if pos >= 0 and not name else pos
        else:
            pos = read_one_of(text, pos, [step] if isinstance(step, str) else step)
        if pos < 0:
            return pos, ""
    pos = skip_ws(text, pos)
    if pos == len(text):
        return MORE, ""
    return (pos, name) if text[pos] == "{" else (NO, "")


class Reading:
    """A scan in progress: content pieces (one after a call that is only whitespace is
    dropped: the newlines between calls are not content) and the calls read so far."""

    def __init__(self, text: str, final: bool) -> None:
        self.text, self.final = text, final
        self.pieces: list[str] = []
        self.calls: list[ToolCall] = []

    def content(self, start: int, end: int) -> None:
        piece = self.text[start:end]
        if piece.strip() or not self.calls:
            self.pieces.append(piece)

    def call(self, name: str, args_start: int, args_end: int) -> None:
        """A call read from its head on: its arguments are the model's text from the `{`
        to where the object closes (`args_end`), or to the end while it is open (`MORE`)."""
        end = len(self.text) if args_end < 0 else args_end
        self.calls.append(ToolCall(name, self.text[args_start:end]))

    def result(self) -> Scan:
        return Scan("".join(self.pieces), tuple(self.calls))


def read_call_object(out: Reading, pos: int, arg_keys: Sequence[str]) -> tuple[int, bool]:
    """A call object `{"name": ..., "<key>": {...}}` at `pos` (after whitespace): (its end,
    or `NO`, or `MORE` while open; whether it is a call, recorded in `out`). A head in
    another shape (keys in another order, arguments as a string) is decided when the
    object closes; its arguments are then re-serialized (`call_from_object`)."""
    text = out.text
    head, name = read_head(text, pos, arg_keys)
    if head >= 0:
        args_end = value_end(text, head)
        out.call(name, head, args_end)
        return (MORE if args_end < 0 else value_end(text, pos)), True
    if head == MORE or not text.startswith("{", pos):
        return head, False
    end = value_end(text, pos)
    if end < 0:
        return MORE, False
    call = object_call(text[pos:end], arg_keys)
    if call is None:
        return NO, False
    out.calls.append(call)
    return end, True


def object_call(body: str, arg_keys: Sequence[str]) -> ToolCall | None:
    """The call a whole JSON text `body` spells, or None."""
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        return None
    return call_from_object(obj, tuple(arg_keys))
