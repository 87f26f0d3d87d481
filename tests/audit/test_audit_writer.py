"""Durability of the audit writer: resume, torn lines, rotation, crashes, concurrency."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from samebits.audit import AuditLogWriter, check_chain, read_log
from samebits.audit.segments import segment_paths

SRC = str(Path(__file__).resolve().parents[2] / "src")


def append_n(writer: AuditLogWriter, n: int, start: int = 0) -> None:
    for i in range(start, start + n):
        writer.append({"type": "request", "fingerprint": "fp", "i": i}).result()


def test_reopening_resumes_the_chain(tmp_path):
    path = tmp_path / "audit.jsonl"
    writer = AuditLogWriter(path)
    append_n(writer, 3)
    head = writer.close()
    reopened = AuditLogWriter(path)
    assert reopened.head == head
    append_n(reopened, 2, start=3)
    reopened.close()
    contents = read_log(path)
    assert [e.entry["seq"] for e in contents.entries] == [0, 1, 2, 3, 4]
    assert check_chain(contents.entries) == []


def test_torn_last_line_is_a_warning_and_the_chain_goes_on(tmp_path):
    path = tmp_path / "audit.jsonl"
    writer = AuditLogWriter(path)
    append_n(writer, 3)
    writer.close()
    with path.open("ab") as f:
        f.write(b'{"type":"request","fingerprint":"fp","i":3,"se')  # crash mid-append
    contents = read_log(path)
    assert [p.kind for p in contents.problems] == ["torn"]
    assert len(contents.entries) == 3
    resumed = AuditLogWriter(path)
    append_n(resumed, 2, start=3)
    resumed.close()
    contents = read_log(path)
    assert len(segment_paths(path)) == 2  # the torn segment was rotated out, kept as evidence
    assert [p.kind for p in contents.problems] == ["torn"]
    assert [e.entry["seq"] for e in contents.entries] == [0, 1, 2, 3, 4]
    assert check_chain(contents.entries) == []


def test_rotation_by_size_keeps_one_chain(tmp_path):
    path = tmp_path / "audit.jsonl"
    writer = AuditLogWriter(path, max_bytes=600)
    append_n(writer, 30)
    writer.close()
    segments = segment_paths(path)
    assert len(segments) > 3
    assert all(p.stat().st_size < 600 + 400 for p in segments)
    contents = read_log(path)
    assert [e.entry["seq"] for e in contents.entries] == list(range(30))
    assert check_chain(contents.entries) == []
    reopened = AuditLogWriter(path, max_bytes=600)
    append_n(reopened, 1, start=30)
    reopened.close()
    assert check_chain(read_log(path).entries) == []


def test_acknowledged_entries_survive_a_crash(tmp_path):
    path = tmp_path / "audit.jsonl"
    child = (
        "import os, sys\n"
        "from samebits.audit import AuditLogWriter\n"
        "w = AuditLogWriter(sys.argv[1])\n"
        "futures = [w.append({'type': 'request', 'fingerprint': 'fp', 'i': i}) for i in range(25)]\n"
        "heads = [f.result() for f in futures]\n"
        "print(heads[-1].entry_hash, flush=True)\n"
        "os._exit(1)  # no close, no flush by Python: only what the writer made durable\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", child, str(path)], capture_output=True, text=True,
        env={"PYTHONPATH": SRC}, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    contents = read_log(path)
    assert len(contents.entries) == 25 and not contents.problems
    assert contents.entries[-1].entry["entry_hash"] == done.stdout.strip()
    assert check_chain(contents.entries) == []


def test_concurrent_appends_form_one_chain(tmp_path):
    path = tmp_path / "audit.jsonl"
    writer = AuditLogWriter(path)
    results = []

    def worker(k: int) -> None:
        for i in range(20):
            results.append(
                writer.append({"type": "request", "fingerprint": "fp", "k": k, "i": i}).result()
            )

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.close()
    contents = read_log(path)
    assert sorted(r.seq for r in results) == list(range(160))
    assert check_chain(contents.entries) == []
