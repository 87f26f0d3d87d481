"""GPU sweep of the MoE tile-table launch (`moe_grouped.tile_table`, one Triton program of
integer sums): its time per call at decode-sized routings of the Qwen3-30B-A3B shape (128
experts, top 8) for each (BLOCK_P, BLOCK_T, num_warps), each config's integers checked equal
to the torch ops' table (`tile_table_torch`) first. The launch config changes no value (exact
integer sums); this picks the fastest for `moe_grouped.TABLE_*`.

    python benchmarks/moe_table_sweep.py [--out FILE]
Timing: CUDA graph of 20 calls, replayed 5 times after a warm-up, median per call.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import torch  # noqa: E402

from samebits.kernels.triton import moe_grouped as mg  # noqa: E402

E, TOP_K, BLOCK_M = 128, 8, 16
FIELDS = ("order", "tokens", "expert", "lo", "hi")


def _ids(n: int) -> torch.Tensor:
    gen = torch.Generator(device="cuda").manual_seed(n)
    return torch.topk(torch.randn((n, E), generator=gen, device="cuda"), TOP_K, dim=1).indices


def _per_call_us(ids: torch.Tensor, calls: int = 20, reps: int = 5) -> float:
    mg.tile_table(ids, E, BLOCK_M)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            mg.tile_table(ids, E, BLOCK_M)
    graph.replay()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1000 / calls)
    return statistics.median(times)


def _equal(ids: torch.Tensor) -> bool:
    a, b = mg.tile_table(ids, E, BLOCK_M), mg.tile_table_torch(ids, E, BLOCK_M)
    return all(torch.equal(getattr(a, f), getattr(b, f)) for f in FIELDS)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("moe_table_sweep.json"))
    args = p.parse_args()
    rows = []
    for (bp, bt, warps), n in itertools.product(
        itertools.product((64, 128, 256), (64, 128), (2, 4, 8)), (1, 16, 64, 256)
    ):
        mg.TABLE_BLOCK_P, mg.TABLE_BLOCK_T, mg.TABLE_WARPS = bp, bt, warps
        ids = _ids(n)
        row = dict(block_p=bp, block_t=bt, warps=warps, tokens=n, equal=_equal(ids))
        row["us"] = round(_per_call_us(ids), 2) if row["equal"] else None
        rows.append(row)
        print(row, flush=True)
    args.out.write_text(
        json.dumps({"device": torch.cuda.get_device_name(), "rows": rows}, indent=1)
    )


if __name__ == "__main__":
    main()
