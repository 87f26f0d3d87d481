"""GPU benchmark of the MoE experts of a decode step, Qwen3-30B-A3B shapes (128 experts, top
8, hidden 2048, expert width 768, bf16), at batch 1 / 16 / 64, one process, one H200:

- `grouped`: the invariant plan's grouped launch (`kernels/triton/moe_grouped.py`), replayed
  from a CUDA graph (what a decode step runs) and eagerly;
- `per_expert`: the invariant plan's earlier path (`kernels.moe.expert_outputs`): eagerly
  each routed expert's own split-plan linears (the counts come to the host), and in a CUDA
  graph its dense form (every expert on every row: what the decode graphs replayed before);
- `torch`: the stock-torch reference (`kernels.moe.FastMoe`, cuBLAS bf16 linears): eagerly
  the routed experts with `index_add_`, in a graph every expert on every row.

Every variant's time covers the experts and the combine of one MoE layer (routing excluded:
the same in all). Before timing, the grouped output is checked bitwise against the per-expert
path. Per cell also the HBM roofline of the expert weights the step reads (distinct experts
routed x 9.4 MB at 4.8 TB/s) and the fraction of it reached; `x48` is one layer's time times
the 48 sparse layers of the model (an estimate of the experts' share of a decode step, not
a measured step). Timing: CUDA events over 50 replays / calls after 5 warm-ups, median of 5.

    python benchmarks/moe_grouped.py [--batches 1,16,64] [--out DIR]
Writes $OUT/moe_grouped.json (or DIR/moe_grouped.json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

E, TOP_K, H, INTER, LAYERS = 128, 8, 2048, 768, 48
HBM_BYTES_PER_S = 4.8e12  # H200 HBM3e peak
EXPERT_BYTES = (2 * INTER * H + H * INTER) * 2


def _experts():
    from samebits.kernels.plan import build_plan
    from samebits.kernels.triton.backend import TritonOps

    ops = TritonOps(build_plan("invariant", device="cuda", moe=True))
    gen = torch.Generator(device="cuda").manual_seed(0)
    experts = []
    for _ in range(E):
        gu = torch.randn((2 * INTER, H), generator=gen, device="cuda") / H**0.5
        dn = torch.randn((H, INTER), generator=gen, device="cuda") / INTER**0.5
        experts.append((ops.linear(gu, None, role="gate_up"), ops.linear(dn, None, role="down")))
    return ops, ops.moe_group(experts)


class _TorchMoe:
    """`FastMoe` over cuBLAS linears of the same weights (the stock-torch reference)."""

    def __init__(self, grouped):
        from samebits.kernels.moe import FastMoe

        self.impl = FastMoe()
        self.impl.act_dtype = torch.bfloat16
        self.impl.silu_mul = lambda t: F.silu(t[:, :INTER]) * t[:, INTER:]
        self.experts = [(lambda t, w=g.weight: F.linear(t, w), lambda t, w=d.weight: F.linear(t, w))
                        for g, d in grouped]  # fmt: skip

    def __call__(self, x, ids, weights):
        return self.impl.moe_experts(x, ids, weights, self.experts)


def _inputs(n: int):
    gen = torch.Generator(device="cuda").manual_seed(n)
    x = torch.randn((n, H), generator=gen, device="cuda").to(torch.bfloat16)
    logits = torch.randn((n, E), generator=gen, device="cuda")
    from samebits.kernels.moe import route

    ids, weights = route(logits, TOP_K, True)
    return x, ids, weights


def _time(fn, graph: bool, calls: int = 50, reps: int = 5) -> float:
    """Median microseconds per call (CUDA events), from graph replays or eager calls."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    run = fn
    if graph:
        g = torch.cuda.CUDAGraph()
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream), torch.cuda.graph(g, stream=stream):
            fn()
        run = g.replay
    for _ in range(5):
        run()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            run()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)


def _cell(ops, grouped, ref, n: int) -> dict:
    from samebits.kernels.moe import combine, expert_outputs
    from samebits.kernels.triton.moe_grouped import grouped_outputs

    x, ids, weights = _inputs(n)
    ours = grouped_outputs(x, ids, grouped, ops.silu_mul)
    theirs = expert_outputs(x, ids, list(grouped), ops.silu_mul)
    equal = bool((ours.view(torch.int16) == theirs.view(torch.int16)).all())
    distinct = int(torch.unique(ids).numel())
    roofline_us = distinct * EXPERT_BYTES / HBM_BYTES_PER_S * 1e6

    def invariant(experts, dense=False):
        def fn():
            out = expert_outputs(x, ids, experts, ops.silu_mul, dense=dense)
            return combine(out, weights, torch.bfloat16)

        return fn

    cell = {"batch": n, "rows": n * TOP_K, "distinct_experts": distinct,
            "grouped_equals_per_expert_bits": equal, "roofline_us": round(roofline_us, 1)}  # fmt: skip
    timed = {
        "grouped_graph": (lambda: ops.moe_experts(x, ids, weights, grouped), True),
        "grouped_eager": (lambda: ops.moe_experts(x, ids, weights, grouped), False),
        "per_expert_eager": (invariant(list(grouped)), False),
        "per_expert_dense_graph": (invariant(list(grouped), dense=True), True),
        "torch_eager": (lambda: ref(x, ids, weights), False),
        "torch_dense_graph": (lambda: ref(x, ids, weights), True),
    }
    for name, (fn, graph) in timed.items():
        us = _time(fn, graph)
        cell[name] = {"us": round(us, 1), "x48_ms": round(us * LAYERS / 1000, 2),
                      "roofline_fraction": round(roofline_us / us, 3)}  # fmt: skip
        print(f"batch {n:3d} {name:24s} {us:9.1f} us  x48 {us * LAYERS / 1000:7.2f} ms  "
              f"roofline {roofline_us / us:6.1%}", flush=True)  # fmt: skip
    return cell


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,16,64")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    ops, grouped = _experts()
    ref = _TorchMoe(grouped)
    cells = [_cell(ops, grouped, ref, int(b)) for b in args.batches.split(",")]
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "shape": dict(experts=E, top_k=TOP_K, hidden=H, inter=INTER, layers=LAYERS),
              "cells": cells}  # fmt: skip
    out = Path(args.out) / "moe_grouped.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    if not all(c["grouped_equals_per_expert_bits"] for c in cells):
        sys.exit("the grouped launch gave other bits than the per-expert path")


if __name__ == "__main__":
    main()
