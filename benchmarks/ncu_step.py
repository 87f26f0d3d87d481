"""Nsight Compute figures per kernel of one batch-64 decode step (issue 13's "Nsight Compute per
kernel"), on the random-weight Llama-3-8B shape in bf16, invariant plan.

Two modes:
  python3 benchmarks/ncu_step.py --step        the program ncu profiles: an engine (eager
      steps, so each kernel is its own launch; the kernels are those the decode graphs
      record), 64 FINAL_ONLY requests of 128 prompt tokens, decoded to a steady state, then
      one step inside the NVTX range "samebits_step";
  python3 benchmarks/ncu_step.py --summarize ncu.csv [--out ncu_step.json]
      per kernel name: launches, total and mean duration, DRAM bytes read and written, DRAM
      throughput (% of peak), SM throughput (% of peak), achieved occupancy, registers per
      thread, from ncu's CSV (one row per kernel and metric).

    ncu --clock-control none --nvtx --nvtx-include "samebits_step/" --csv \\
        --metrics "$(python3 benchmarks/ncu_step.py --metrics)" \\
        python3 benchmarks/ncu_step.py --step > ncu.csv
Evidence class: measurement (hardware counters; each kernel replayed alone by ncu, so no
kernel overlaps another, unlike the engine's device digests).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

METRICS = {
    "gpu__time_duration.sum": "duration",
    "dram__bytes_read.sum": "dram_read",
    "dram__bytes_write.sum": "dram_write",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "launch__registers_per_thread": "registers",
    "launch__grid_size": "grid",
}
UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
         "byte": 1.0, "Kbyte": 1e3, "Mbyte": 1e6, "Gbyte": 1e9}  # fmt: skip


def step(batch: int = 64, prompt: int = 128, warm: int = 48) -> None:
    """The profiled program: one decode step in the NVTX range `samebits_step`."""
    import torch

    from samebits import SamplingParams
    from samebits.deployment import build_deployment
    from samebits.engine.engine import LLMEngine
    from samebits.model.random_init import random_model
    from samebits.outputs import RequestOutputKind

    loaded = random_model("llama-3-8b", seed=0, device="cuda", dtype=torch.bfloat16)
    dep = build_deployment(loaded, "invariant", device="cuda")
    engine = LLMEngine.from_deployment(
        dep, enforce_eager=True, num_kv_blocks=2048, max_num_seqs=batch,
        max_num_batched_tokens=8192,
    )  # fmt: skip
    params = SamplingParams(max_tokens=warm + 8, temperature=0.0, ignore_eos=True, seed=0)
    for i in range(batch):
        engine.add_request(f"r{i}", [5 + (i + t) % 50 for t in range(prompt)], params,
                           output_kind=RequestOutputKind.FINAL_ONLY)  # fmt: skip
    for _ in range(warm):
        engine.step()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_push("samebits_step")
    engine.step()
    torch.cuda.synchronize()
    torch.cuda.nvtx.range_pop()


def _value(row: dict) -> float | None:
    text = row.get("Metric Value", "").replace(",", "")
    try:
        value = float(text)
    except ValueError:
        return None
    return value * UNITS.get(row.get("Metric Unit", ""), 1.0)


def summarize(csv_text: str) -> dict:
    """Per kernel name: launches and the metrics (durations in us, bytes summed, % averaged)."""
    start = csv_text.find('"ID"')
    rows = list(csv.DictReader(io.StringIO(csv_text[start:]))) if start >= 0 else []
    launches: dict[tuple[str, str], dict] = defaultdict(dict)
    for row in rows:
        key = METRICS.get(row.get("Metric Name", ""))
        if key is not None:
            launches[(row["Kernel Name"], row["ID"])][key] = _value(row)
    by_name: dict[str, list[dict]] = defaultdict(list)
    for (name, _), metrics in launches.items():
        by_name[name.split("(")[0][:80]].append(metrics)
    out = {name: _aggregate(items) for name, items in by_name.items()}
    return dict(sorted(out.items(), key=lambda kv: -kv[1]["total_us"]))


def _aggregate(items: list[dict]) -> dict:
    def mean(key):
        vals = [m[key] for m in items if m.get(key) is not None]
        return round(sum(vals) / len(vals), 2) if vals else None

    total = sum(m.get("duration") or 0.0 for m in items)
    read = sum(m.get("dram_read") or 0.0 for m in items)
    return {"launches": len(items), "total_us": round(total, 1), "mean_us": mean("duration"),
            "dram_read_mb": round(read / 1e6, 2),
            "dram_write_mb": round(sum(m.get("dram_write") or 0.0 for m in items) / 1e6, 2),
            "dram_read_tb_s": round(read / (total * 1e-6) / 1e12, 2) if total else None,
            "dram_pct": mean("dram_pct"), "sm_pct": mean("sm_pct"),
            "occupancy_pct": mean("occupancy_pct"), "registers": mean("registers"),
            "grid": mean("grid")}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", action="store_true")
    ap.add_argument("--metrics", action="store_true", help="print the metric list for ncu")
    ap.add_argument("--summarize")
    ap.add_argument("--out", default="ncu_step.json")
    args = ap.parse_args()
    if args.metrics:
        print(",".join(METRICS))
    elif args.step:
        step()
    elif args.summarize:
        summary = summarize(Path(args.summarize).read_text(errors="replace"))
        Path(args.out).write_text(json.dumps(summary, indent=1))
        for name, s in list(summary.items())[:15]:
            print(f"{s['total_us']:9.1f} us {s['launches']:4d}x {s['dram_read_tb_s']} TB/s "
                  f"dram {s['dram_pct']}% sm {s['sm_pct']}% occ {s['occupancy_pct']}% "
                  f"regs {s['registers']}  {name}")  # fmt: skip


if __name__ == "__main__":
    main()
