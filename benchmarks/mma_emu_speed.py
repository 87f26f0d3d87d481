"""Speed of the native MMA emulator (kernels/cpu/mma_emu.c): dot products and k16 MMA steps
per second (wall clock, and per CPU-second: the figure that holds on a loaded machine) for
x [M,K] x w [N,K] bf16 chains of normal values, by K and thread count.
Usage: python benchmarks/mma_emu_speed.py [--threads 1 2] [--size 512]; prints one line per
(K, threads) and a JSON list on the last line."""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from samebits.kernels.cpu import mma_cases, mma_emu


def measure(k: int, size: int, threads: int, repeat: int = 3) -> dict:
    x, w, acc = mma_cases.make_case("normal", size, size, k, np.random.default_rng(k))
    best, cpu = float("inf"), float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        mma_emu.chain_bits(x, w, acc, threads=threads)
        best, cpu = min(best, time.perf_counter() - t0), min(cpu, time.process_time() - c0)
    dots = size * size
    return {"K": k, "threads": threads, "dots_per_s": dots / best,
            "steps_per_s": dots * (k // 16) / best, "seconds": best,
            "steps_per_cpu_s": dots * (k // 16) / cpu}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--ks", type=int, nargs="+", default=[16, 256, 4096])
    args = ap.parse_args()
    rows = []
    for threads in args.threads:
        for k in args.ks:
            size = args.size if k <= 256 else max(64, args.size // 4)
            rows.append(measure(k, size, threads))
            r = rows[-1]
            print(f"K={k:<5} threads={threads}: {r['dots_per_s']:.3e} dots/s, "
                  f"{r['steps_per_s']:.3e} steps/s ({r['steps_per_cpu_s']:.3e} per CPU-second)",
                  flush=True)  # fmt: skip
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
