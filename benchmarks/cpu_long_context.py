"""Batch-1 decode attention at long contexts on the CPU (issue 25 item 5): the C kernel
(sbattn.c) with the plan's span S = 512, whose spans the kernel splits between its threads
when a call has few (token, KV head) items, against the same kernel with one span covering
the whole context (S >= context: the single-chain work pattern of the definition before
spans, one item per KV head) and against S = 512 with the split launch turned off, all in
one process on the same KV cache. Optionally (`--baseline REV`) the kernel of an earlier
commit, compiled from `git show REV:...` with the same flags (its single-chain definition).

Per cell: one query token at position context - 1, a float32 paged KV cache of `context`
slots (pages of 16, in order), the median and the best of `--repeats` timed calls after a
warm-up. Raw numbers go to stdout and to a JSON file (`--out`).

Invariant: nothing here changes engine behaviour; it only times the kernels.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO_ROOT, command_line, loadavg, machine_lines, utc_now  # noqa: E402

from samebits.kernels.cpu import native, sbattn  # noqa: E402
from samebits.kernels.cpu.plan import KEY_TILE  # noqa: E402
from samebits.kernels.plan import ATTENTION_SPAN  # noqa: E402

SHAPES = {  # name: (query heads, KV heads, head dim)
    "smollm2-135m": (9, 3, 64),
    "llama-3-8b": (32, 8, 128),
}
BLOCK = 16
ONE_CHAIN = 1 << 30  # a span longer than any context
C_FILES = ("sbattn.c", "sbpool.c", "sbpool.h", "sbexp.h")


class Cell:
    """One shape and context: the KV cache, the query and the kernel arguments."""

    def __init__(self, shape: str, context: int, seed: int = 0) -> None:
        heads, kv, dim = SHAPES[shape]
        gen = torch.Generator().manual_seed(seed)
        slots = -(-context // BLOCK) * BLOCK
        self.k = torch.randn(slots, kv, dim, generator=gen)
        self.v = torch.randn(slots, kv, dim, generator=gen)
        self.q = torch.randn(1, heads, dim, generator=gen)
        self.pos = np.array([context - 1], dtype=np.int64)
        self.req = np.zeros(1, dtype=np.int64)
        self.table = np.arange(slots // BLOCK, dtype=np.int64)[None]
        self.out = torch.empty_like(self.q)
        self.kv_bytes = 2 * context * kv * dim * 4
        self.shape, self.context = shape, context

    def run(self, span: int, threads: int) -> None:
        """The C entry point, as sblayer.c calls it (tables prepared once per forward)."""
        heads, kv, dim = SHAPES[self.shape]
        native.library().sb_attention(
            self.q.data_ptr(), heads, dim, self.k.data_ptr(), self.v.data_ptr(), kv,
            self.pos.ctypes.data, self.req.ctypes.data, self.table.ctypes.data,
            self.table.shape[1], BLOCK, KEY_TILE, span, 0.125, self.out.data_ptr(), 1, threads,
        )  # fmt: skip

    def check(self) -> None:
        """The entry point gives the bits of the Python wrapper (sbattn.paged_attention)."""
        ours = torch.empty_like(self.q)
        sbattn.paged_attention(
            self.q, self.k, self.v, self.pos, self.req, self.table, BLOCK, KEY_TILE, 0.125,
            ours, 2, span=ATTENTION_SPAN,
        )  # fmt: skip
        self.run(ATTENTION_SPAN, 2)
        assert ours.numpy().tobytes() == self.out.numpy().tobytes()

    def run_baseline(self, lib: ctypes.CDLL, threads: int) -> None:
        heads, kv, dim = SHAPES[self.shape]
        lib.sb_attention(
            self.q.data_ptr(), heads, dim, self.k.data_ptr(), self.v.data_ptr(), kv,
            self.pos.ctypes.data, self.req.ctypes.data, self.table.ctypes.data,
            self.table.shape[1], BLOCK, KEY_TILE, 0.125, self.out.data_ptr(), 1, threads,
        )  # fmt: skip


def baseline_library(rev: str, tmp: Path) -> ctypes.CDLL:
    """sbattn.c + sbpool.c of commit `rev` (the signature without a span), built like
    native.py builds the kernels."""
    for name in C_FILES:
        text = subprocess.run(
            ["git", "show", f"{rev}:src/samebits/kernels/cpu/{name}"], cwd=REPO_ROOT,
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        (tmp / name).write_text(text)
    out = tmp / "baseline.so"
    cc = native._compiler()
    sources = [str(tmp / "sbattn.c"), str(tmp / "sbpool.c")]
    subprocess.run([cc, *native.CFLAGS, f"-I{tmp}", *sources, "-o", str(out), "-lm"], check=True)
    lib = ctypes.CDLL(str(out))
    _L, _P, _F = ctypes.c_long, ctypes.c_void_p, ctypes.c_float
    lib.sb_attention.argtypes = [_P, _L, _L, _P, _P, _L, _P, _P, _P, _L, _L, _L, _F, _P, _L, _L]
    lib.sb_attention.restype = None
    return lib


def _split_off(run):
    """`run` with the split launch turned off (sb_attention_set_split(0)) around it."""
    lib = native.library()

    def call() -> None:
        lib.sb_attention_set_split(0)
        try:
            run()
        finally:
            lib.sb_attention_set_split(1)

    return call


def measure(cell: Cell, threads: int, repeats: int, baseline: ctypes.CDLL | None) -> dict:
    """The variants of one cell, interleaved (each round times every variant once, so a
    change of load on the shared machine meets all of them); median and best in ms."""
    variants = {
        "span512_split": lambda: cell.run(ATTENTION_SPAN, threads),
        "span512_sequential": _split_off(lambda: cell.run(ATTENTION_SPAN, threads)),
        "one_chain": lambda: cell.run(ONE_CHAIN, threads),
    }
    if baseline is not None:
        variants["baseline_rev"] = lambda: cell.run_baseline(baseline, threads)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for round_ in range(repeats + 2):  # two warm-up rounds
        for name, fn in variants.items():
            start = time.perf_counter()
            fn()
            if round_ >= 2:
                times[name].append((time.perf_counter() - start) * 1e3)
    results = {}
    for name, runs in times.items():
        best = min(runs)
        results[name] = {
            "median_ms": statistics.median(runs), "best_ms": best, "runs_ms": runs,
            "kv_gb_per_s": cell.kv_bytes / (best * 1e-3) / 1e9,
        }  # fmt: skip
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", type=int, nargs="+", default=[512, 4096, 16384, 32768])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--baseline", default="", help="also time sbattn.c of this git revision")
    ap.add_argument("--out", type=Path, default=None, help="JSON output path")
    args = ap.parse_args()
    torch.set_num_threads(1)
    report = {
        "date": utc_now(), "command": command_line(), "machine": machine_lines(),
        "threads": args.threads, "span": ATTENTION_SPAN, "key_tile": KEY_TILE,
        "baseline": args.baseline, "load_before": loadavg(), "cells": [],
    }  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        baseline = baseline_library(args.baseline, Path(tmp)) if args.baseline else None
        print(f"{report['date']}  threads={args.threads}  load {report['load_before']}")
        print(f"{'shape':<14} {'context':>7} {'variant':<20} {'median ms':>10} {'best ms':>9} "
              f"{'KV GB/s':>8}")  # fmt: skip
        for shape in args.shapes:
            for context in args.contexts:
                cell = Cell(shape, context)
                cell.check()
                results = measure(cell, args.threads, args.repeats, baseline)
                for name, r in results.items():
                    print(f"{shape:<14} {context:>7} {name:<20} {r['median_ms']:>10.3f} "
                          f"{r['best_ms']:>9.3f} {r['kv_gb_per_s']:>8.2f}")  # fmt: skip
                report["cells"].append({"shape": shape, "context": context, **results})
    report["load_after"] = loadavg()
    print(f"load after: {report['load_after']}")
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
