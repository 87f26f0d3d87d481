"""Decode-attention launch sweep on the GPU: the shipped paged kernel under other launch
parameters (warps, pipeline stages, a register cap) on Llama-3-8B heads (32 / 8, D = 128,
pages of 16). (A variant loading the next key tile before reducing the current one was
measured on 2026-12-01, no faster, and removed: RESULTS.md.)

Every candidate is first compared bit for bit (int16 views) with the shipped launch on the same
inputs; only then timed (CUDA-graph replays with a cold L2 before every call, as
`gpu_ops.py --graph`). SDPA flash on contiguous K/V is timed alongside as a reference; GB/s is
the K and V bytes read over the time.

    python3 benchmarks/attention_sweep.py [--cells 64x256 64x384 256x560 8x1024 1x4096]
Writes JSON to $OUT/attention_sweep.json (or --out). GPU only. Evidence class: measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gpu_ops import (  # noqa: E402
    BLOCK_SIZE,
    HEAD_DIM,
    NUM_HEADS,
    NUM_KV_HEADS,
    _metadata,
    bench_graph,
    machine_info,
    make_paged_kv,
    randn,
    same_bits,
    sdpa_reference,
)

from samebits.kernels.triton.attention import KEY_BLOCK, LOG2E  # noqa: E402

LAUNCHES = [(w, s) for w in (2, 4, 8) for s in (1, 2, 3, 4)]
MAXNREG = (None,)  # --maxnreg: register caps tried on the shipped kernel at 4 warps


def _launch(kernel, q, kv, meta, scale, warps: int, stages: int | None, maxnreg=None):
    import torch

    out = torch.empty_like(q)
    extra = {} if stages is None else {"num_stages": stages}
    extra.update({} if maxnreg is None else {"maxnreg": maxnreg})
    kernel[(meta.num_programs, NUM_KV_HEADS)](
        q, kv.k_cache, kv.v_cache, out, meta.positions, meta.prog_req, meta.prog_row0,
        meta.query_end, meta.block_tables, meta.block_tables.shape[1], scale * LOG2E,
        HKV=NUM_KV_HEADS, GROUP=meta.group, D=HEAD_DIM, PAGE=BLOCK_SIZE, BLOCK_M=meta.block_m,
        BLOCK_N=KEY_BLOCK, num_warps=warps, **extra,
    )  # fmt: skip
    return out


def sweep_cell(batch: int, context: int, rep: int) -> dict:
    """All candidates at one (batch, context): bits vs the shipped launch, then us and GB/s."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from samebits.kernels.triton._attention_kernel import paged_attention_kernel
    from samebits.kernels.triton.attention import paged_attention

    scale = HEAD_DIM**-0.5
    kv = make_paged_kv(batch, context, seed=7 + batch + context)
    q = randn((batch, NUM_HEADS, HEAD_DIM), torch.bfloat16, seed=3 + batch)
    meta = _metadata([context - 1] * batch, range(batch + 1), kv.tables)
    shipped = paged_attention(q, kv.k_cache, kv.v_cache, meta, scale)
    gbytes = 2.0 * batch * context * NUM_KV_HEADS * HEAD_DIM * 2 / 1e9
    rows = []

    def timed(name, fn, equal):
        us = bench_graph(fn, rep) * 1e3 if equal else None
        gbps = gbytes / (us * 1e-6) if us else None
        rows.append({"candidate": name, "bits_equal": equal, "us": us, "gbps": gbps})
        print(f"  {batch}x{context} {name:<24} equal={equal} us={us} GB/s={gbps}", flush=True)

    timed("shipped", lambda: paged_attention(q, kv.k_cache, kv.v_cache, meta, scale), True)
    for name, kernel in (("shipped", paged_attention_kernel),):
        for warps, stages in LAUNCHES:
            fn = lambda k=kernel, w=warps, s=stages: _launch(k, q, kv, meta, scale, w, s)  # noqa: E731
            try:
                equal = same_bits(fn(), shipped)
            except Exception as exc:  # noqa: BLE001 - a launch that does not compile is a result
                rows.append({"candidate": f"{name} w{warps} s{stages}", "error": str(exc)[:200]})
                continue
            timed(f"{name} w{warps} s{stages}", fn, equal)
    for cap in MAXNREG:
        if cap is None:
            continue
        fn = lambda c=cap: _launch(paged_attention_kernel, q, kv, meta, scale, 4, None, c)  # noqa: E731
        timed(f"shipped w4 maxnreg {cap}", fn, same_bits(fn(), shipped))
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        ref_fn, note = sdpa_reference(q.unsqueeze(2), kv.k_ref, kv.v_ref, causal=False)
        timed(f"sdpa ({note})", ref_fn, True)
    return {"batch": batch, "context": context, "kv_gbytes": gbytes, "rows": rows}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cells", nargs="+", default=["64x256", "64x384", "256x560", "8x1024", "1x4096"]
    )
    ap.add_argument("--rep", type=int, default=30)
    ap.add_argument("--maxnreg", type=int, nargs="*", default=[], help="register caps to try")
    ap.add_argument("--launches", choices=("all", "none"), default="all",
                    help="none: skip the warps x stages grid (shipped, caps and SDPA only)")  # fmt: skip
    ap.add_argument(
        "--out", default=os.path.join(os.environ.get("OUT", "."), "attention_sweep.json")
    )
    args = ap.parse_args()
    cells = [tuple(int(x) for x in c.split("x")) for c in args.cells]
    global LAUNCHES, MAXNREG
    MAXNREG = (None, *args.maxnreg)
    if args.launches == "none":
        LAUNCHES = []
    result = {"machine": machine_info(), "cells": [sweep_cell(b, c, args.rep) for b, c in cells]}
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
