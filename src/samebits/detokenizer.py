"""Incremental detokenization and stop strings.

`IncrementalDetokenizer` turns a stream of token ids into a stream of finalized text: text is
released only once the bytes under it are complete, so a multi-byte UTF-8 character split over
several byte-level tokens is released whole, never as U+FFFD first and the real character later.
Each step decodes a short window (the tokens released last step, as context, plus the pending
ones), so a step costs O(window), not O(output). The window moves on only when a step released
text: a token that decodes to nothing (a skipped special token) must not become the window's
first token, whose leading space a Metaspace decoder strips. Step by step this releases what
`tokenizers.decoders.DecodeStream` releases (tests/unit/test_detokenizer_decodestream.py); it
is kept because DecodeStream has no `flush`: bytes of an incomplete character at the end of
an output never come out of it, so its text is not `decode(ids)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

REPLACEMENT_CHAR = "\ufffd"


class Decoder(Protocol):
    """The part of a tokenizer the detokenizer needs (`tokenizers.Tokenizer` fits)."""

    def decode(self, ids: list[int], skip_special_tokens: bool = ...) -> str: ...


class IncrementalDetokenizer:
    """Finalized text of a growing list of output token ids.

    Invariants: the concatenation of everything `append` and `flush` returned equals `text`;
    after `flush`, `text == tokenizer.decode(token_ids)` for tokenizers whose decoding of a
    window is stable under appending (byte-level BPE, Metaspace, byte fallback, WordPiece).
    Text is held back while the decoded window ends in U+FFFD (an incomplete UTF-8 sequence)
    or adds nothing to its context.
    """

    def __init__(self, tokenizer: Decoder, skip_special_tokens: bool = True) -> None:
        self._tokenizer = tokenizer
        self._skip_special_tokens = skip_special_tokens
        self._token_ids: list[int] = []
        self._prefix_offset = 0  # window start: first context token
        self._read_offset = 0  # first token whose text is not released yet
        self._text = ""

    @property
    def text(self) -> str:
        """All text released so far."""
        return self._text

    @property
    def token_ids(self) -> list[int]:
        return list(self._token_ids)

    @property
    def num_tokens(self) -> int:
        """Tokens appended so far."""
        return len(self._token_ids)

    def append(self, token_id: int) -> str:
        """Add one token; return the text it finalizes ("" while a character is incomplete)."""
        self._token_ids.append(int(token_id))
        return self._release(force=False)

    def flush(self) -> str:
        """Release any held-back text (e.g. at finish, when trailing bytes stay invalid)."""
        return self._release(force=True)

    def _release(self, force: bool) -> str:
        if self._read_offset == len(self._token_ids):
            return ""
        context = self._decode(self._token_ids[self._prefix_offset : self._read_offset])
        window = self._decode(self._token_ids[self._prefix_offset :])
        if not force and (window.endswith(REPLACEMENT_CHAR) or len(window) <= len(context)):
            return ""  # incomplete character, or nothing new (e.g. a skipped special token)
        new_text = window[len(context) :]
        self._prefix_offset = self._read_offset
        self._read_offset = len(self._token_ids)
        self._text += new_text
        return new_text

    def _decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return self._tokenizer.decode(ids, skip_special_tokens=self._skip_special_tokens)


def find_stop_string(text: str, stops: Sequence[str], start: int) -> tuple[int, str] | None:
    """The earliest stop string occurrence that ends at or after `start`, as (index, stop).

    Pass `start = len(text before the last append)`: a stop string that straddles old and new
    text is found, one lying wholly inside the old text is not (it was checked before). Among
    occurrences at the same index the stop listed first wins.
    """
    best: tuple[int, str] | None = None
    for stop in stops:
        if not stop:
            raise ValueError("find_stop_string: stop strings must be non-empty")
        index = text.find(stop, max(0, start - len(stop) + 1))
        if index >= 0 and (best is None or index < best[0]):
            best = (index, stop)
    return best


def truncate_at_stop(text: str, index: int, stop: str, include_stop_str_in_output: bool) -> str:
    """The output text for a stop found at `index`: cut before it, or after it if included."""
    return text[: index + len(stop)] if include_stop_str_in_output else text[:index]
