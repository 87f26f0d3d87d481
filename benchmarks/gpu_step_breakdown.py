"""Where a GPU decode step's time goes (issue 13): a torch.profiler trace of engine steps.

The invariant engine (CUDA graphs, async scheduling, device digests) decodes `--batch`
requests of `--prompt` tokens (FINAL_ONLY, as `LLM.generate` adds them, so digests are hashed
on the device); after `--warm` decode steps, `--steps` steps run under torch.profiler. From
the trace: wall time per step, the kernels' GPU time per step by category (linears,
attention, norms / RoPE / SiLU, digests, argmax and copies, other), the compute stream's busy
time (the union of its kernels' intervals) and so its idle time per step (what the host or a
wait costs the device), and the top kernels by time. Kernels replayed from a CUDA graph are
traced by CUPTI like eager ones.

    python benchmarks/gpu_step_breakdown.py                  # H200, llama-3-8b, batch 64
    python benchmarks/gpu_step_breakdown.py --eager          # the same steps without graphs
    python benchmarks/gpu_step_breakdown.py --device cpu --preset tiny-llama --steps 4  # dry run

Writes JSON to --out (default $OUT/gpu_step_breakdown.json), and the chrome trace (gzip) next
to it with --trace.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import json
import os
import shutil
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402

# (category, substrings of a kernel's name), first match wins.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("digests", ("sha256",)),
    ("linears", ("linear_", "ordered_sum", "gemm", "cutlass", "sm90_xmma")),
    ("attention", ("attention", "flash", "fmha")),
    ("norms_rope_silu", ("rms_norm", "rope", "silu")),
    ("argmax_copies", ("reduce", "max", "copy", "Memcpy", "memcpy", "index", "gather")),
)


def category(name: str) -> str:
    """The category of a kernel (or copy) by its name."""
    for cat, keys in CATEGORIES:
        if any(k in name for k in keys):
            return cat
    return "other"


def union_us(intervals: list[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) intervals (µs)."""
    total, end = 0.0, float("-inf")
    for lo, hi in sorted(intervals):
        if hi <= end:
            continue
        total += hi - max(lo, end)
        end = hi
    return total


def device_events(prof) -> list[dict]:
    """The trace's GPU kernels and copies: name, stream, start and duration (µs)."""
    trace = prof.profiler.kineto_results.events()
    out = []
    for e in trace:
        if e.device_type().name != "CUDA":
            continue
        out.append({"name": e.name(), "stream": e.device_resource_id(),
                    "start": e.start_ns() / 1e3, "dur": e.duration_ns() / 1e3})  # fmt: skip
    return out


def summarize(events: list[dict], steps: int, wall_ms: float) -> dict:
    """Per-step GPU time by category, the busiest stream's union (compute stream) and the
    top kernels."""
    by_cat: dict[str, float] = defaultdict(float)
    by_name: dict[str, list[float]] = defaultdict(list)
    per_stream: dict[int, list[tuple[float, float]]] = defaultdict(list)
    for e in events:
        by_cat[category(e["name"])] += e["dur"]
        by_name[e["name"]].append(e["dur"])
        per_stream[e["stream"]].append((e["start"], e["start"] + e["dur"]))
    busy = {s: union_us(iv) / 1e3 / steps for s, iv in per_stream.items()}
    compute = max(per_stream, key=lambda s: len(per_stream[s])) if per_stream else None
    top = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:25]
    return {
        "steps": steps,
        "wall_ms_per_step": wall_ms / steps,
        "gpu_ms_per_step_by_category": {k: v / 1e3 / steps for k, v in sorted(by_cat.items())},
        "stream_busy_ms_per_step": {str(s): b for s, b in busy.items()},
        "compute_stream": compute,
        "compute_idle_ms_per_step": (wall_ms / steps - busy[compute]) if compute else None,
        "top_kernels": [
            {
                "name": n[:120],
                "calls_per_step": len(d) / steps,
                "us_per_call": sum(d) / len(d),
                "ms_per_step": sum(d) / 1e3 / steps,
            }
            for n, d in top
        ],  # fmt: skip
    }


def start_requests(llm, batch: int, prompt: int, max_tokens: int) -> None:
    """`batch` FINAL_ONLY greedy requests, as `LLM.generate` adds them."""
    from samebits import SamplingParams
    from samebits.outputs import RequestOutputKind

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, seed=0)
    for i in range(batch):
        ids = [(7 + 31 * i + 13 * j) % 30000 + 100 for j in range(prompt)]
        llm.engine.add_request(f"b{i}", ids, params, output_kind=RequestOutputKind.FINAL_ONLY)


def profile_steps(llm, steps: int, device: str):
    """Run `steps` engine steps under torch.profiler; (profiler, wall ms)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    if device == "cuda":
        torch.cuda.synchronize()
    with profile(activities=acts) as prof:
        start = time.perf_counter()
        for _ in range(steps):
            llm.engine.step()
        wall = (time.perf_counter() - start) * 1e3  # the host loop: bound by the device
        if device == "cuda":
            torch.cuda.synchronize()  # the last digests; not in `wall`
    return prof, wall


def run(args: argparse.Namespace) -> dict:
    import torch
    from gpu_serving import build_llm, no_digests

    from samebits.model.random_init import random_model

    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    loaded = random_model(args.preset, seed=0, device=args.device, dtype=dtype)
    llm, _ = build_llm(loaded, "invariant", args.device, enforce_eager=args.eager)
    with no_digests(llm) if args.no_digests else contextlib.nullcontext():
        out = profiled_run(llm, args)
    return {"preset": args.preset, "batch": args.batch, "prompt": args.prompt,
            "warm": args.warm, "eager": args.eager, "device": args.device,
            "no_digests": args.no_digests, **out}  # fmt: skip


def profiled_run(llm, args: argparse.Namespace) -> dict:
    """Start the requests, prefill them, take `warm` decode steps, profile `steps`, finish."""
    start_requests(llm, args.batch, args.prompt, args.warm + args.steps + 8)
    while any(r.num_computed_tokens < args.prompt for r in llm.engine.scheduler.running) or (
        llm.engine.scheduler.waiting
    ):
        llm.engine.step()
    for _ in range(args.warm):
        llm.engine.step()
    prof, wall = profile_steps(llm, args.steps, args.device)
    out = summarize(device_events(prof), args.steps, wall)
    if args.trace:
        path = Path(args.out).with_suffix(".trace.json")
        prof.export_chrome_trace(str(path))
        with open(path, "rb") as src, gzip.open(f"{path}.gz", "wb") as dst:
            shutil.copyfileobj(src, dst)
        path.unlink()
    while llm.engine.has_unfinished_requests():
        llm.engine.step()
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="llama-3-8b")
    p.add_argument("--device", default="cuda")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt", type=int, default=128)
    p.add_argument("--warm", type=int, default=64, help="decode steps before profiling")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--eager", action="store_true", help="no CUDA graphs")
    p.add_argument("--no-digests", action="store_true", help="digests replaced by a no-op")
    p.add_argument("--trace", action="store_true", help="also write the chrome trace (gzip)")
    common.add_kernel_knobs(p)
    default = Path(os.environ.get("OUT", ".")) / "gpu_step_breakdown.json"
    p.add_argument("--out", default=str(default))
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    common.apply_kernel_knobs(args)
    result = run(args)
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(json.dumps({k: v for k, v in result.items() if k != "top_kernels"}, indent=1))
    for k in result["top_kernels"][:12]:
        print(f"{k['ms_per_step']:8.3f} ms  {k['calls_per_step']:6.1f}x  {k['name'][:80]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
