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
a measured step). Each timed call runs 4 layers of their own random weights and routing one
after the other (4.8 GB of expert weights: no layer's weights are still in the 60 MB L2 when
it runs again) and the time is divided by 4. Timing: CUDA events over 20 replays / calls
after 5 warm-ups, median of 5.

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
TIMED_LAYERS = 4
HBM_BYTES_PER_S = 4.8e12  # H200 HBM3e peak
EXPERT_BYTES = (2 * INTER * H + H * INTER) * 2


def _layers():
    """The op set and TIMED_LAYERS layers of 128 random experts each (grouped)."""
    from samebits.kernels.plan import build_plan
    from samebits.kernels.triton.backend import TritonOps

    ops = TritonOps(build_plan("invariant", device="cuda", moe=True))
    gen = torch.Generator(device="cuda").manual_seed(0)
    layers = []
    for _ in range(TIMED_LAYERS):
        experts = []
        for _ in range(E):
            gu = torch.randn((2 * INTER, H), generator=gen, device="cuda") / H**0.5
            dn = torch.randn((H, INTER), generator=gen, device="cuda") / INTER**0.5
            experts.append((ops.linear(gu, None, role="gate_up"),
                            ops.linear(dn, None, role="down")))  # fmt: skip
        layers.append(ops.moe_group(experts))
    return ops, layers


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


def _inputs(n: int, layer: int):
    from samebits.kernels.moe import route

    gen = torch.Generator(device="cuda").manual_seed(1000 * layer + n)
    x = torch.randn((n, H), generator=gen, device="cuda").to(torch.bfloat16)
    logits = torch.randn((n, E), generator=gen, device="cuda")
    ids, weights = route(logits, TOP_K, True)
    return x, ids, weights


def _time(fn, graph: bool, calls: int = 20, reps: int = 5) -> float:
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


def _cell(ops, layers, refs, n: int) -> dict:
    from samebits.kernels.moe import combine, expert_outputs
    from samebits.kernels.triton.moe_grouped import grouped_outputs

    inputs = [_inputs(n, i) for i in range(TIMED_LAYERS)]
    equal = all(
        bool((grouped_outputs(x, ids, g, ops.silu_mul).view(torch.int16)
              == expert_outputs(x, ids, list(g), ops.silu_mul).view(torch.int16)).all())
        for g, (x, ids, _) in zip(layers, inputs, strict=True)
    )  # fmt: skip
    distinct = statistics.mean(int(torch.unique(ids).numel()) for _, ids, _ in inputs)
    roofline_us = distinct * EXPERT_BYTES / HBM_BYTES_PER_S * 1e6

    def each(step):
        def fn():
            for layer, (x, ids, w) in enumerate(inputs):
                step(layer, x, ids, w)

        return fn

    def per_expert(dense: bool):
        return each(lambda i, x, ids, w: combine(
            expert_outputs(x, ids, list(layers[i]), ops.silu_mul, dense=dense), w,
            torch.bfloat16))  # fmt: skip

    grouped = each(lambda i, x, ids, w: ops.moe_experts(x, ids, w, layers[i]))
    torch_ref = each(lambda i, x, ids, w: refs[i](x, ids, w))
    cell = {"batch": n, "rows": n * TOP_K, "distinct_experts_mean": distinct,
            "grouped_equals_per_expert_bits": equal, "roofline_us": round(roofline_us, 1)}  # fmt: skip
    timed = {
        "grouped_graph": (grouped, True),
        "grouped_eager": (grouped, False),
        "per_expert_eager": (per_expert(False), False),
        "per_expert_dense_graph": (per_expert(True), True),
        "torch_eager": (torch_ref, False),
        "torch_dense_graph": (torch_ref, True),
    }
    for name, (fn, graph) in timed.items():
        us = _time(fn, graph) / TIMED_LAYERS
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
    ops, layers = _layers()
    refs = [_TorchMoe(g) for g in layers]
    cells = [_cell(ops, layers, refs, int(b)) for b in args.batches.split(",")]
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "shape": dict(experts=E, top_k=TOP_K, hidden=H, inter=INTER, layers=LAYERS),
              "timed_layers": TIMED_LAYERS,
              "cells": cells}  # fmt: skip
    out = Path(args.out) / "moe_grouped.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")
    if not all(c["grouped_equals_per_expert_bits"] for c in cells):
        sys.exit("the grouped launch gave other bits than the per-expert path")


if __name__ == "__main__":
    main()
