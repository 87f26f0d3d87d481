"""Durable, hash-chained append-only writer of the audit log.

One background thread owns the file. `append(record)` queues a record and returns a future;
the thread assigns `seq` and `prev_hash`, computes `entry_hash`, writes one line per entry,
then flushes and fsyncs the whole batch before resolving the futures (group commit): an
entry whose future resolved survives a crash. At start the writer resumes the chain from the
last complete entry; a torn last line (crash during an append) is left in place and its
segment is rotated out, so a torn line only ever ends a segment. When the active segment
reaches `max_bytes` it is renamed to the next numbered segment (see `segments.py`).
"""

from __future__ import annotations

import os
import queue
import threading
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import platformdirs

from samebits.audit.chain import GENESIS_HASH, canonical_json, seal_entry
from samebits.audit.reader import read_segment
from samebits.audit.segments import next_segment_path, segment_paths

DEFAULT_MAX_BYTES = 64 * 1024 * 1024


def default_audit_log_path() -> Path:
    """`<user data dir>/samebits/audit/audit.jsonl` (platformdirs)."""
    return Path(platformdirs.user_data_dir("samebits")) / "audit" / "audit.jsonl"


@dataclass(frozen=True)
class AppendResult:
    """Where an entry landed in the chain."""

    seq: int
    entry_hash: str


@dataclass
class _Pending:
    record: dict[str, Any]
    future: Future


class AuditLogWriter:
    """Append-only audit log at `path`. Invariant: entries on disk form one unbroken chain
    (seq 0, 1, 2, ... with each `prev_hash` equal to the previous `entry_hash`)."""

    def __init__(self, path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES, fsync: bool = True):
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be positive, got {max_bytes!r}")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._fsync = fsync
        self._queue: queue.SimpleQueue[_Pending | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._next_seq, self._head = self._resume()
        self._file = open(self.path, "ab")  # noqa: SIM115 - owned by the writer thread
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="samebits-audit", daemon=True)
        self._thread.start()

    @property
    def head(self) -> AppendResult:
        """The last written entry (seq -1 and the genesis hash when the log is empty)."""
        with self._lock:
            return AppendResult(self._next_seq - 1, self._head)

    def append(self, record: dict[str, Any]) -> Future:
        """Queue `record` (JSON-serializable, no NaN); the future yields an AppendResult."""
        canonical_json(record)  # fail fast, in the caller, on unserializable records
        future: Future = Future()
        with self._lock:
            if self._closed:
                future.set_exception(RuntimeError(f"audit log {self.path} is closed"))
            else:
                self._queue.put(_Pending(record, future))
        return future

    def close(self) -> AppendResult:
        """Write everything queued, stop the thread, close the file; returns the head."""
        with self._lock:
            already = self._closed
            self._closed = True
            if not already:
                self._queue.put(None)
        if not already:
            self._thread.join()
            self._file.close()
        return self.head

    def _resume(self) -> tuple[int, str]:
        last: dict[str, Any] | None = None
        for seg in segment_paths(self.path):
            entries, problems = read_segment(seg)
            if entries:
                last = entries[-1].entry
            if seg == self.path and any(p.kind == "torn" for p in problems):
                self._rotate_file()
        if last is None:
            return 0, GENESIS_HASH
        return int(last["seq"]) + 1, str(last["entry_hash"])

    def _run(self) -> None:
        stop = False
        while not stop:
            batch = [self._queue.get()]
            while True:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(p is None for p in batch)
            self._write_batch([p for p in batch if p is not None])

    def _write_batch(self, batch: list[_Pending]) -> None:
        if not batch:
            return
        done: list[tuple[_Pending, AppendResult]] = []
        try:
            for pending in batch:
                done.append((pending, self._write_one(pending.record)))
            self._sync()
        except Exception as exc:  # disk full, I/O error: every entry of the batch fails
            for pending in batch:
                pending.future.set_exception(exc)
            return
        for pending, result in done:
            pending.future.set_result(result)
        if self._file.tell() >= self.max_bytes:
            self._rotate_active()

    def _write_one(self, record: dict[str, Any]) -> AppendResult:
        with self._lock:
            entry = seal_entry(record, self._next_seq, self._head)
            self._file.write(canonical_json(entry).encode("ascii") + b"\n")
            self._next_seq += 1
            self._head = entry["entry_hash"]
            return AppendResult(entry["seq"], entry["entry_hash"])

    def _sync(self) -> None:
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def _rotate_active(self) -> None:
        self._file.close()
        self._rotate_file()
        self._file = open(self.path, "ab")  # noqa: SIM115

    def _rotate_file(self) -> None:
        os.replace(self.path, next_segment_path(self.path))
        _fsync_dir(self.path.parent)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
