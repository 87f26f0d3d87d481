"""The hash chain catches edited, dropped, reordered and inserted entries."""

from __future__ import annotations

import json

import pytest

from samebits.audit import AuditLogWriter, check_chain, read_log
from samebits.audit.chain import GENESIS_HASH, canonical_json, compute_entry_hash, seal_entry


def write_log(path, count: int) -> list[dict]:
    writer = AuditLogWriter(path)
    for i in range(count):
        writer.append({"type": "request", "fingerprint": "fp", "value": i, "x": 0.1 * i}).result()
    writer.close()
    return [json.loads(line) for line in path.read_text().splitlines()]


def rewrite(path, entries: list[dict]) -> None:
    path.write_text("".join(canonical_json(e) + "\n" for e in entries))


def kinds(path) -> list[tuple[str, int]]:
    contents = read_log(path)
    return [(i.kind, int(i.where.rsplit(":", 1)[1])) for i in check_chain(contents.entries)]


def test_honest_chain_is_intact(tmp_path):
    path = tmp_path / "audit.jsonl"
    entries = write_log(path, 10)
    assert [e["seq"] for e in entries] == list(range(10))
    assert entries[0]["prev_hash"] == GENESIS_HASH
    for before, after in zip(entries, entries[1:], strict=False):
        assert after["prev_hash"] == before["entry_hash"]
    assert all(compute_entry_hash(e) == e["entry_hash"] for e in entries)
    assert check_chain(read_log(path).entries) == []


def test_canonical_json_round_trips_byte_for_byte(tmp_path):
    path = tmp_path / "audit.jsonl"
    write_log(path, 5)
    for line in path.read_text().splitlines():
        assert canonical_json(json.loads(line)) == line


def test_edited_entry_is_reported(tmp_path):
    path = tmp_path / "audit.jsonl"
    entries = write_log(path, 8)
    entries[4]["value"] = 999
    rewrite(path, entries)
    assert kinds(path) == [("edited", 5)]


def test_edited_and_rehashed_entry_breaks_the_next_link(tmp_path):
    path = tmp_path / "audit.jsonl"
    entries = write_log(path, 8)
    entries[4]["value"] = 999
    entries[4]["entry_hash"] = compute_entry_hash(entries[4])
    rewrite(path, entries)
    assert kinds(path) == [("inserted", 6)]


def test_dropped_entry_is_reported(tmp_path):
    path = tmp_path / "audit.jsonl"
    entries = write_log(path, 8)
    rewrite(path, entries[:3] + entries[4:])
    assert kinds(path) == [("dropped", 4)]


def test_dropped_first_entry_is_reported(tmp_path):
    path = tmp_path / "audit.jsonl"
    entries = write_log(path, 4)
    rewrite(path, entries[1:])
    assert kinds(path) == [("dropped", 1)]


def test_reordered_entries_are_reported(tmp_path):
    path = tmp_path / "audit.jsonl"
    entries = write_log(path, 8)
    entries[3], entries[4] = entries[4], entries[3]
    rewrite(path, entries)
    found = kinds(path)
    assert ("reordered", 5) in found
    assert {line for _, line in found} == {4, 5, 6}


def test_inserted_entry_is_reported(tmp_path):
    path = tmp_path / "audit.jsonl"
    entries = write_log(path, 8)
    forged = seal_entry(
        {"type": "request", "fingerprint": "fp", "value": -1}, 3, entries[2]["entry_hash"]
    )
    rewrite(path, entries[:3] + [forged] + entries[3:])
    assert kinds(path) == [("inserted", 5)]


def test_rewritten_chain_is_caught_by_the_published_head(tmp_path):
    path = tmp_path / "audit.jsonl"
    entries = write_log(path, 6)
    head = entries[-1]["entry_hash"]
    forged, prev = [], GENESIS_HASH
    for i, entry in enumerate(entries):
        record = {k: v for k, v in entry.items() if k not in ("seq", "prev_hash", "entry_hash")}
        if i == 2:
            record["value"] = 42
        forged.append(seal_entry(record, i, prev))
        prev = forged[-1]["entry_hash"]
    rewrite(path, forged)
    contents = read_log(path)
    assert check_chain(contents.entries) == []
    issues = check_chain(contents.entries, expected_head=head)
    assert [i.kind for i in issues] == ["head"]


def test_truncated_tail_is_caught_by_the_published_head(tmp_path):
    path = tmp_path / "audit.jsonl"
    entries = write_log(path, 6)
    rewrite(path, entries[:-2])
    contents = read_log(path)
    assert check_chain(contents.entries) == []
    assert [i.kind for i in check_chain(contents.entries, entries[-1]["entry_hash"])] == ["head"]


def test_corrupt_middle_line_is_not_a_torn_line(tmp_path):
    path = tmp_path / "audit.jsonl"
    entries = write_log(path, 4)
    lines = [canonical_json(e) for e in entries]
    lines[1] = lines[1][:20]
    path.write_text("\n".join(lines) + "\n")
    contents = read_log(path)
    assert [(p.kind, p.line_no) for p in contents.problems] == [("corrupt", 2)]
    assert [i.kind for i in check_chain(contents.entries)] == ["dropped"]


def test_unserializable_record_is_refused_by_the_caller(tmp_path):
    writer = AuditLogWriter(tmp_path / "audit.jsonl")
    with pytest.raises(ValueError):
        writer.append({"type": "request", "value": float("nan")})
    writer.close()
