"""Cost of the attention certificates' run-time metadata check (`kernels.attention_check`).

Side by side in one process: `attention_metadata` (the host's metadata build, device cpu so
only host work is timed) and `check_metadata` alone on the same arrays, for decode and
prefill steps of the engine's GPU default sizes. Writes JSON (`--out`).

    python benchmarks/attention_meta_check.py --out benchmarks/results/DATE-meta-check.json
"""

from __future__ import annotations

import argparse
import json
import platform
import time

import numpy as np

from samebits.kernels.attention_check import check_metadata
from samebits.kernels.triton.attention_meta import _programs, attention_metadata, default_block_m

STEPS = {  # name: (request lengths, context per request)
    "decode 256 x 1 token, 8k context": ([1] * 256, 8192),
    "decode 32 x 1 token, 32k context": ([1] * 32, 32768),
    "prefill 16 x 512 tokens": ([512] * 16, 512),
    "mixed 8192 tokens (64 x 127 + 64 x 1)": ([127] * 64 + [1] * 64, 4096),
}


def _arrays(lens: list[int], ctx: int, block: int = 16):
    qsl = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    pos = np.concatenate([np.arange(ctx - n, ctx) for n in lens]).astype(np.int32)
    tables = np.arange(len(lens) * (ctx // block + 1), dtype=np.int32).reshape(len(lens), -1)
    return pos, qsl, tables


def _best(fn, reps: int = 200) -> float:
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _ in range(reps):
            fn()
        best = min(best, (time.perf_counter() - t) / reps)
    return best * 1e6  # microseconds per call


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for name, (lens, ctx) in STEPS.items():
        pos, qsl, tables = _arrays(lens, ctx)
        bm = default_block_m(max(lens), 4)
        req, row0 = _programs(qsl, bm // 4)
        build = _best(lambda: attention_metadata(pos, qsl, tables, 16, 4, "cpu"))  # noqa: B023
        check = _best(lambda: check_metadata(pos, qsl, tables, req, row0, bm // 4, 16))  # noqa: B023
        rows.append({"step": name, "metadata_build_us": round(build, 2),
                     "check_us": round(check, 2)})  # fmt: skip
        print(f"{name:42s} build {build:8.1f} us (check included)  check {check:6.1f} us")
    out = {"machine": platform.node(), "cpu": platform.processor(), "date": time.strftime("%F"),
           "group": 4, "block_size": 16, "rows": rows}  # fmt: skip
    if args.out:
        with open(args.out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
