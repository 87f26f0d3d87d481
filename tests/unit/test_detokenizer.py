"""Tests of incremental detokenization and stop-string matching."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from samebits.detokenizer import (
    REPLACEMENT_CHAR,
    IncrementalDetokenizer,
    find_stop_string,
    truncate_at_stop,
)
from tiny_models import byte_bpe_tokenizer, metaspace_bpe_tokenizer

TEXT = "Hello wörld 😀 日本語 the end"


@pytest.fixture(scope="module")
def byte_bpe() -> Tokenizer:
    return byte_bpe_tokenizer()


@pytest.fixture(scope="module")
def metaspace_bpe() -> Tokenizer:
    return metaspace_bpe_tokenizer()


def _stream(detok: IncrementalDetokenizer, ids: list[int]) -> list[str]:
    return [detok.append(token) for token in ids]


def test_multibyte_characters_split_over_tokens_are_held_back(byte_bpe):
    ids = byte_bpe.encode(TEXT).ids
    single = [byte_bpe.decode([t]) for t in ids]
    assert sum(REPLACEMENT_CHAR in piece for piece in single) >= 4  # really split
    detok = IncrementalDetokenizer(byte_bpe)
    deltas = _stream(detok, ids)
    assert "" in deltas
    assert all(REPLACEMENT_CHAR not in delta for delta in deltas)
    assert "".join(deltas) == detok.text == byte_bpe.decode(ids) == TEXT
    assert detok.flush() == ""


def test_text_after_each_step_is_the_complete_prefix(byte_bpe):
    ids = byte_bpe.encode(TEXT).ids
    detok = IncrementalDetokenizer(byte_bpe)
    for k, token in enumerate(ids, start=1):
        detok.append(token)
        full = byte_bpe.decode(ids[:k])
        assert detok.text == full.rstrip(REPLACEMENT_CHAR)
    assert detok.token_ids == ids


def test_flush_releases_an_incomplete_tail(byte_bpe):
    ids = byte_bpe.encode("ok 😀").ids
    detok = IncrementalDetokenizer(byte_bpe)
    deltas = _stream(detok, ids[:-1])  # emoji missing its last byte
    assert REPLACEMENT_CHAR not in detok.text
    tail = detok.flush()
    assert tail.endswith(REPLACEMENT_CHAR)
    assert "".join(deltas) + tail == detok.text == byte_bpe.decode(ids[:-1])


def test_special_tokens_skipped_or_kept(byte_bpe):
    eos = byte_bpe.token_to_id("<|eos|>")
    ids = byte_bpe.encode("the end").ids + [eos]
    skipping = IncrementalDetokenizer(byte_bpe)
    keeping = IncrementalDetokenizer(byte_bpe, skip_special_tokens=False)
    assert "".join(_stream(skipping, ids)) == "the end"
    assert "".join(_stream(keeping, ids)) == "the end<|eos|>"


def test_metaspace_windows_keep_word_spaces(metaspace_bpe):
    text = "the quick brown fox jumps over the lazy dog"
    ids = metaspace_bpe.encode(text).ids
    assert "".join(metaspace_bpe.decode([t]) for t in ids) != text  # a window is needed
    detok = IncrementalDetokenizer(metaspace_bpe)
    assert "".join(_stream(detok, ids)) == metaspace_bpe.decode(ids) == text


def test_stop_string_spanning_tokens_is_found_when_completed(byte_bpe):
    ids = byte_bpe.encode(TEXT).ids
    detok = IncrementalDetokenizer(byte_bpe)
    stops = ("lo wö", "😀 日")
    found = []
    for token in ids:
        start = len(detok.text)
        detok.append(token)
        hit = find_stop_string(detok.text, stops, start)
        if hit is not None:
            found.append((len(detok.token_ids), hit))
    after_first = len(byte_bpe.decode(ids[:1]))
    assert after_first < TEXT.index("lo wö") + len("lo wö")  # the stop needs the second token
    assert found[0] == (2, (TEXT.index("lo wö"), "lo wö"))
    emoji_stop = [hit for _, hit in found if hit[1] == "😀 日"]
    assert emoji_stop == [(TEXT.index("😀 日"), "😀 日")]  # reported once, when completed


def test_find_stop_string_rules():
    text = "abc STOP def END"
    assert find_stop_string(text, ["END", "STOP"], 0) == (4, "STOP")  # earliest wins
    assert find_stop_string(text, ["STOP"], 9) is None  # wholly in old text
    assert find_stop_string(text, ["STOP"], 7) == (4, "STOP")  # ends at/after start
    assert find_stop_string(text, ["ST", "STOP"], 0) == (4, "ST")  # same index: first listed
    assert find_stop_string(text, ["nope"], 0) is None
    assert find_stop_string(text, [], 0) is None
    with pytest.raises(ValueError, match="non-empty"):
        find_stop_string(text, [""], 0)


def test_truncate_at_stop():
    text = "answer: 42\n\nmore"
    index, stop = find_stop_string(text, ["\n\n"], 0)
    assert truncate_at_stop(text, index, stop, include_stop_str_in_output=False) == "answer: 42"
    assert truncate_at_stop(text, index, stop, include_stop_str_in_output=True) == "answer: 42\n\n"
