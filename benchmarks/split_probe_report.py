"""Markdown tables of a `split_decode_probe.py --floor` run (issue 25), for RESULTS.md, a column
per cell: the shipped step and span kernel, the span launch's floors (paged loads alone, with
the two MMAs; TMA box loads), and each launch shape's span and step time with its bits.

    python benchmarks/split_probe_report.py benchmarks/results/<the run>.json

us, and % of HBM where the probe computed it (the card's nominal bandwidth, `gpu_ops.hbm_gbps`).
Evidence class: measurement (the run's numbers, rearranged; nothing is computed anew).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def _cell(row: dict) -> str:
    c = row["context"]
    return f"{row['batch']} x " + (f"{c // 1024}k" if c % 1024 == 0 else str(c))


def _us(entry: dict | None) -> str:
    """'us (% HBM)' of one floor, its error, or a dash."""
    if not entry:
        return "-"
    return "error" if "error" in entry else f"{entry['us']} ({entry['pct_hbm']}%)"


def _grid(rows: list[dict], key: str, show) -> str:
    """A markdown table of `row[key]`'s entries: a row per entry name, a column per cell,
    each entry shown by `show`."""
    names = sorted({n for r in rows for n in r.get(key, {})})
    head = "| | " + " | ".join(_cell(r) for r in rows) + " |\n|" + "---|" * (len(rows) + 1) + "\n"
    return head + "".join(
        f"| {n} | " + " | ".join(show(r.get(key, {}).get(n)) for r in rows) + " |\n" for n in names
    )


def _shape(entry: dict | None) -> str:
    """'span us / step us (% HBM of the step)', and whether the bits differ."""
    if not entry or "error" in entry:
        return "error" if entry else "-"
    bits = "" if entry["bits_equal"] else " **bits differ**"
    return f"{entry['spans_us']} / {entry['step_us']} ({entry['pct_hbm_step']}%){bits}"


def shipped(rows: list[dict]) -> str:
    """The shipped launch: whole step, span kernel, merge (us), % HBM of the step, a column
    per cell."""
    head = "| | " + " | ".join(_cell(r) for r in rows) + " |\n|" + "---|" * (len(rows) + 1) + "\n"
    lines = [("whole us", lambda r: r["us"]["whole"]), ("span kernel us", lambda r: r["us"]["split"]),
             ("merge us", lambda r: r["us"]["merge"]), ("% HBM whole", lambda r: r["pct_hbm_whole"])]  # fmt: skip
    return head + "".join(
        f"| {name} | " + " | ".join(str(get(r)) for r in rows) + " |\n" for name, get in lines
    )


def report(doc: dict) -> str:
    rows = [r for r in doc["rows"] if "us" in r]
    parts = [f"Machine: {doc.get('machine', {})}", "Shipped launch:", shipped(rows),
             "Floors, us (% HBM):", _grid(rows, "floors", _us),
             "TMA floors, us (% HBM):", _grid(rows, "tma_floors", _us),
             "Launch shapes, span launch(es) / step, us (% HBM of the step):",
             _grid(rows, "shapes", _shape)]  # fmt: skip
    return "\n".join(parts)


if __name__ == "__main__":
    print(report(json.loads(Path(sys.argv[1]).read_text())))
