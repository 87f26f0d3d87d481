"""Reading an audit log back: entries in chain order, plus torn or corrupt lines.

A *torn* line is the last line of a segment that was not completely written (no trailing
newline, or not a JSON object): the mark of a crash during an append. It is reported as a
warning and ignored, never fatal. Any other line that is not a JSON object is *corrupt*.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from samebits.audit.segments import segment_paths


@dataclass(frozen=True)
class LoggedEntry:
    """One parsed entry and where it was read (segment file, 1-based line number)."""

    segment: str
    line_no: int
    entry: dict[str, Any]

    @property
    def where(self) -> str:
        return f"{Path(self.segment).name}:{self.line_no}"


@dataclass(frozen=True)
class ReadProblem:
    """A line that is not an entry. `kind` is 'torn' (warning) or 'corrupt' (failure)."""

    segment: str
    line_no: int
    kind: str
    message: str


@dataclass(frozen=True)
class LogContents:
    entries: list[LoggedEntry] = field(default_factory=list)
    problems: list[ReadProblem] = field(default_factory=list)
    segments: list[str] = field(default_factory=list)

    @property
    def torn(self) -> list[ReadProblem]:
        return [p for p in self.problems if p.kind == "torn"]

    @property
    def corrupt(self) -> list[ReadProblem]:
        return [p for p in self.problems if p.kind == "corrupt"]


def read_log(path: str | Path) -> LogContents:
    """Read every segment of the log at `path`. FileNotFoundError when there is none."""
    path = Path(path)
    paths = segment_paths(path)
    if not paths:
        raise FileNotFoundError(f"audit log {str(path)!r} does not exist")
    contents = LogContents(segments=[str(p) for p in paths])
    for seg in paths:
        entries, problems = read_segment(seg)
        contents.entries.extend(entries)
        contents.problems.extend(problems)
    return contents


def read_segment(path: Path) -> tuple[list[LoggedEntry], list[ReadProblem]]:
    """Parse one segment file line by line."""
    data = path.read_bytes()
    lines = data.split(b"\n")
    terminated = lines[:-1]
    tail = lines[-1]
    entries: list[LoggedEntry] = []
    problems: list[ReadProblem] = []
    for i, raw in enumerate(terminated, start=1):
        obj, error = _parse_line(raw)
        if obj is not None:
            entries.append(LoggedEntry(str(path), i, obj))
        elif i == len(terminated) and not tail:
            problems.append(ReadProblem(str(path), i, "torn", f"torn last line ({error})"))
        else:
            problems.append(ReadProblem(str(path), i, "corrupt", f"corrupt line ({error})"))
    if tail:
        problems.append(
            ReadProblem(str(path), len(lines), "torn", "torn last line (no trailing newline)")
        )
    return entries, problems


def _parse_line(raw: bytes) -> tuple[dict[str, Any] | None, str]:
    try:
        obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        return None, f"not JSON: {exc}"
    if not isinstance(obj, dict):
        return None, "not a JSON object"
    return obj, ""


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not allowed")
