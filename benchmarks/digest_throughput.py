"""How fast this host computes the per-row logits digests (SHA-256 of 512 KB float32 rows,
a 128k vocabulary), on 1 thread and on the engine's row workers: the ceiling on digested
rows per second that a serving step pays for (issue 13).

    python benchmarks/digest_throughput.py [--rows 256] [--vocab 128256]

Prints JSON: GB/s and rows/s per thread count, the CPU model and whether it has SHA
instructions (`sha_ni` in /proc/cpuinfo).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def cpu_facts() -> dict:
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines()
                  if ln.startswith("model name")), "unknown")  # fmt: skip
    return {"cpu": model, "cores": os.cpu_count(), "sha_ni": " sha_ni" in text}


def rate(rows: np.ndarray, threads: int, reps: int = 3) -> dict:
    """Best of `reps` passes digesting every row, `threads` at a time."""
    from samebits.outputs import logits_digest

    best = float("inf")
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(reps):
            start = time.perf_counter()
            list(pool.map(logits_digest, rows))
            best = min(best, time.perf_counter() - start)
    return {"threads": threads, "seconds": best, "gb_s": rows.nbytes / best / 1e9,
            "rows_s": len(rows) / best}  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=256)
    p.add_argument("--vocab", type=int, default=128256)
    args = p.parse_args(argv)
    rows = np.random.default_rng(0).standard_normal((args.rows, args.vocab), dtype=np.float32)
    counts = sorted({1, 4, os.cpu_count() or 1, min(32, os.cpu_count() or 1)})
    out = {**cpu_facts(), "row_bytes": rows[0].nbytes, "runs": [rate(rows, n) for n in counts]}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
