"""Where the segments of a rotated audit log live.

The active segment is the path given (`audit.jsonl`); rotation renames it to
`audit.jsonl.000001`, `audit.jsonl.000002`, ... in order, so the whole log is the numbered
segments in increasing order followed by the active file.
"""

from __future__ import annotations

from pathlib import Path

SEGMENT_DIGITS = 6


def rotated_segments(path: Path) -> list[Path]:
    """Rotated segments of the log at `path`, oldest first."""
    found = []
    for candidate in path.parent.glob(path.name + ".*"):
        suffix = candidate.name[len(path.name) + 1 :]
        if suffix.isdigit() and candidate.is_file():
            found.append((int(suffix), candidate))
    return [p for _, p in sorted(found)]


def segment_paths(path: Path) -> list[Path]:
    """All segments of the log at `path` in chain order (rotated ones, then the active file)."""
    paths = rotated_segments(path)
    if path.is_file():
        paths.append(path)
    return paths


def next_segment_path(path: Path) -> Path:
    """The name the active file gets at its rotation."""
    existing = rotated_segments(path)
    index = int(existing[-1].name.rsplit(".", 1)[1]) + 1 if existing else 1
    return path.with_name(f"{path.name}.{index:0{SEGMENT_DIGITS}d}")
