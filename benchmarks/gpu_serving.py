"""GPU serving throughput (issue 13), one command, one run, side by side: the invariant plan,
the fast plan (cuBLAS + SDPA, same engine) and HF transformers `generate` (eager, and with its
static KV cache, which transformers compiles; the compiled run is timed after a first run), on a
random-weight model of a real shape (default Llama-3-8B) in bfloat16.

Workloads:
  (a) decode-heavy: N requests (default 256), prompts 128-1024 tokens, outputs 256-512 tokens,
      all submitted at once (`LLM.generate`);
  (b) HF's shape: batch 64, 128 prompt tokens, 256 new tokens (also run by HF `generate`);
plus, on the invariant plan: (a) and (b) with the per-row SHA-256 digests replaced by a no-op
(the digest cost; never done outside this benchmark) and with the digests hashed the other
way (host rows or the device SHA-256; `--device-digests` picks the engine's way), the decode step time at batch 64, and 32
requests of (a) replayed alone, compared bit for bit (tokens and digests), and (b) and the
batch-64 step with async scheduling off (on is the cuda default: step n+1 is launched before
step n's outputs are built), and with `lookahead` off (on is the default with async
scheduling: a plain-greedy step's successor is launched before its tokens are known).

Decode steps replay CUDA graphs (captured at engine start, the capture time is reported, as are
the steps replayed and the steps run eagerly); `--graphs off` runs every step eagerly
(`enforce_eager`), `--graphs both` runs each plan both ways, side by side.

    python benchmarks/gpu_serving.py                      # H200, llama-3-8b, full
    python benchmarks/gpu_serving.py --quick              # fewer / shorter requests
    python benchmarks/gpu_serving.py --graphs both        # with and without CUDA graphs
    python benchmarks/gpu_serving.py --device cpu --preset tiny-llama --quick   # a dry run

Writes JSON to --out (default $OUT/gpu_serving.json or ./gpu_serving.json).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import common  # noqa: E402


def workload_a(vocab: int, count: int, quick: bool, seed: int = 0) -> list[tuple[list[int], int]]:
    """(prompt ids, max_tokens) per request: prompts 128-1024, outputs 256-512 (quick: /8)."""
    rng = random.Random(seed)
    scale = 8 if quick else 1
    out = []
    for _ in range(count):
        n = rng.randint(128, 1024) // scale
        out.append(([rng.randrange(vocab - 3) for _ in range(n)], rng.randint(256, 512) // scale))
    return out


def workload_b(vocab: int, quick: bool, seed: int = 1) -> list[tuple[list[int], int]]:
    rng = random.Random(seed)
    new = 32 if quick else 256
    return [([rng.randrange(vocab - 3) for _ in range(128)], new) for _ in range(64)]


def run_engine(llm, jobs: Sequence[tuple[list[int], int]]) -> dict:
    """Generate every job at once (greedy, EOS ignored); tokens/s over the whole call. Cold:
    the prefix cache is dropped first, so a workload run twice (with and without digests, ...)
    computes its prompts both times (before 2026-12-01 a second run hit the cache)."""
    from samebits import SamplingParams

    if not llm.reset_prefix_cache():
        raise RuntimeError("the engine still runs requests; cannot start a cold run")
    params = [SamplingParams(max_tokens=m, temperature=0.0, ignore_eos=True, seed=i)
              for i, (_, m) in enumerate(jobs)]  # fmt: skip
    start = time.perf_counter()
    outs = llm.generate([p for p, _ in jobs], params)
    wall = time.perf_counter() - start
    tokens = sum(len(o.outputs[0].token_ids) for o in outs)
    return {"wall_s": wall, "tokens": tokens, "tok_s": tokens / wall, "outputs": outs}


def alone_check(llm, jobs, outs, sample: int) -> dict:
    """`sample` requests of a batched run replayed one at a time: equal tokens and digests."""
    from samebits import SamplingParams

    picks = random.Random(7).sample(range(len(jobs)), min(sample, len(jobs)))
    bad = []
    for i in picks:
        prompt, m = jobs[i]
        one = llm.generate([prompt], SamplingParams(max_tokens=m, temperature=0.0,
                                                     ignore_eos=True, seed=i))[0]  # fmt: skip
        a, b = one.outputs[0], outs[i].outputs[0]
        if a.token_ids != b.token_ids or a.logits_digests != b.logits_digests:
            bad.append(i)
    return {"compared": len(picks), "mismatching": bad}


def decode_step_ms(llm, batch: int, steps: int = 16, streamed: bool = False) -> float:
    """Median wall time of an engine step once `batch` requests are all decoding. FINAL_ONLY
    requests, as (b)'s (`LLM.generate`; digests on the device), or with `streamed` CUMULATIVE
    ones (what the server's streams see: each step's digests hashed on the host)."""
    from samebits.outputs import RequestOutputKind

    engine = llm.engine
    kind = RequestOutputKind.CUMULATIVE if streamed else RequestOutputKind.FINAL_ONLY
    _start_decoding(engine, batch, steps + 4, kind)
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        engine.step()
        times.append((time.perf_counter() - start) * 1e3)
    while engine.has_unfinished_requests():
        engine.step()
    return sorted(times)[len(times) // 2]


def _start_decoding(engine, batch: int, max_tokens: int, kind) -> None:
    """`batch` requests of 64 prompt tokens added and stepped until all of them decode."""
    from samebits import SamplingParams

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True, seed=0)
    for i in range(batch):
        engine.add_request(f"step-{i}", [5 + i % 50] * 64, params, output_kind=kind)
    while any(len(t) < 64 for t in _computed(engine)):
        engine.step()


def moe_step_roofline(llm, step_ms: float, batch: int = 64) -> dict | None:
    """`moe_roofline.roofline` of the batch-`batch` decode step (None for a dense model): the
    experts one step of that batch touches (the `decode_step_ms` setup, one eager step)."""
    from moe_roofline import roofline, routed_experts

    from samebits.model.checkpoint import expected_weight_shapes
    from samebits.outputs import RequestOutputKind

    engine = llm.engine
    cfg = engine.runner.model.cfg
    if cfg.moe is None:
        return None
    _start_decoding(engine, batch, 8, RequestOutputKind.FINAL_ONLY)
    experts = routed_experts(llm)
    while engine.has_unfinished_requests():
        engine.step()
    weights = sum(2 * math.prod(shape) for shape in expected_weight_shapes(cfg).values())
    return roofline(cfg, experts, step_ms, weights)


def graph_replay_ms(llm, bucket: int = 64, reps: int = 20) -> float | None:
    """GPU time of one replay of the decode graph of `bucket` rows (CUDA events, back to
    back, no host work between): the device's share of a decode step. Padding rows only
    (their K/V goes to the sink block), so attention reads one position per row."""
    import torch

    graphs = getattr(llm.engine.runner, "graphs", None)
    if graphs is None or (bucket, False) not in graphs.graphs:
        return None
    graphs.buffers.fill((), bucket)
    graph = graphs.graphs[bucket, False]
    graph.replay()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def _computed(engine) -> list:
    return [r.all_token_ids[: r.num_computed_tokens] for r in engine.scheduler.running]


class _NoDeviceDigests:
    """Stands in for the runner's device SHA-256 of a step: no kernel, no copy, "" digests."""

    def __init__(self, source, ready) -> None:
        self._rows = source.shape[0]

    def done(self) -> bool:
        return True

    def hex(self) -> list[str]:
        return [""] * self._rows


@contextlib.contextmanager
def no_digests(llm):
    """No digest work at all inside (cost measurement only, never done outside benchmarks):
    on a GPU the device digests become `_NoDeviceDigests` (the rows then never cross to the
    host), on the CPU `logits_digest` becomes a no-op."""
    import samebits.engine.output_processor as output_module
    import samebits.engine.runner as runner_module

    real, real_device = output_module.logits_digest, runner_module._DeviceDigests
    output_module.logits_digest = lambda row: ""
    runner_module._DeviceDigests = _NoDeviceDigests
    engine, before = llm.engine, llm.engine.runtime.device_digests
    engine.update_runtime_config(device_digests=True)
    try:
        yield
    finally:
        output_module.logits_digest, runner_module._DeviceDigests = real, real_device
        engine.update_runtime_config(device_digests=before)


def without_digests(llm, jobs) -> dict:
    """A workload run with `no_digests`."""
    with no_digests(llm):
        return run_engine(llm, jobs)


def other_digests(llm, jobs) -> dict:
    """A workload with the digests hashed the other way (host rows <-> the device SHA-256)."""
    engine, before = llm.engine, llm.engine.runtime.device_digests
    engine.update_runtime_config(device_digests=not before)
    try:
        return run_engine(llm, jobs)
    finally:
        engine.update_runtime_config(device_digests=before)


def hf_throughput(model, jobs, device: str, cache: str = "dynamic") -> dict:
    """HF transformers `generate` on the same weights, one static batch (workload b).

    `cache` "dynamic" is eager HF (its default cache); "static" is HF's static KV cache, whose
    forward transformers compiles by itself on cuda: that run is made twice, the first
    (compile included) reported as `first_wall_s`, the second as the figure."""
    import torch

    ids = torch.tensor([p for p, _ in jobs], device=device)
    new = jobs[0][1]
    kw = {"cache_implementation": "static"} if cache == "static" else {}
    runs = [_hf_generate(model, ids, new, device, kw) for _ in range(2 if kw else 1)]
    wall, tokens = runs[-1]
    out = {"cache": cache, "wall_s": wall, "tokens": tokens, "tok_s": tokens / wall}
    if kw:
        out["first_wall_s"] = runs[0][0]
    return out


def _hf_generate(model, ids, new: int, device: str, kw: dict) -> tuple[float, int]:
    import torch

    with torch.inference_mode():
        start = time.perf_counter()
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=new, min_new_tokens=new, **kw)  # fmt: skip
        _sync(device)
        wall = time.perf_counter() - start
    return wall, int((out.shape[1] - ids.shape[1]) * out.shape[0])


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def build_llm(loaded, plan: str, device: str, enforce_eager: bool = False):
    """The plan's engine (decode graphs captured here on cuda unless `enforce_eager`) and the
    seconds it took to build (the deployment's qualification and the capture included)."""
    from samebits import LLM
    from samebits.deployment import build_deployment
    from samebits.engine.engine import LLMEngine

    start = time.perf_counter()
    dep = build_deployment(loaded, plan, device=device)
    kw = {"gpu_memory_utilization": 0.85} if device == "cuda" else {"num_kv_blocks": 4096}
    engine = LLMEngine.from_deployment(
        dep, max_num_seqs=256, max_num_batched_tokens=8192, enforce_eager=enforce_eager, **kw
    )
    return LLM(engine=engine), time.perf_counter() - start


def graph_facts(llm) -> dict:
    """Steps replayed from decode graphs and run eagerly so far, and the capture time."""
    graphs = llm.engine.runner.graphs
    if graphs is None:
        return {"cuda_graphs": False}
    return {"cuda_graphs": True, "capture_s": graphs.capture_seconds, **graphs.stats()}


def run_plan(loaded, plan: str, args: argparse.Namespace, jobs_a, jobs_b, eager: bool) -> dict:
    """Workloads (a) and (b) on one engine; on the invariant plan also without digests and
    the alone check."""
    llm, build_s = build_llm(loaded, plan, args.device, eager)
    llm.engine.update_runtime_config(device_digests=not args.host_digests)
    run_engine(llm, jobs_b[:4])  # warm-up: compile kernels
    if args.only_b:
        return _only_b(llm, build_s, jobs_b)
    a, b = run_engine(llm, jobs_a), run_engine(llm, jobs_b)
    out = {"build_s": build_s, "a_tok_s": a["tok_s"], "a_wall_s": a["wall_s"],
           "b_tok_s": b["tok_s"], "b_wall_s": b["wall_s"],
           "decode_step_ms_b64": decode_step_ms(llm, 64),
           "decode_step_ms_b64_streamed": decode_step_ms(llm, 64, streamed=True),
           "graph_replay_ms_b64": graph_replay_ms(llm, 64)}  # fmt: skip
    out["moe_roofline_b64"] = moe_step_roofline(llm, out["decode_step_ms_b64"])
    if plan == "invariant":
        llm.engine.update_runtime_config(async_scheduling=False)
        out["b_tok_s_sync_scheduling"] = run_engine(llm, jobs_b)["tok_s"]
        out["decode_step_ms_b64_sync_scheduling"] = decode_step_ms(llm, 64)
        llm.engine.update_runtime_config(async_scheduling=True, lookahead=False)
        out["b_tok_s_without_lookahead"] = run_engine(llm, jobs_b)["tok_s"]
        out["decode_step_ms_b64_without_lookahead"] = decode_step_ms(llm, 64)
        llm.engine.update_runtime_config(lookahead=True)
        out["device_digests"] = llm.engine.runtime.device_digests
        out["a_tok_s_other_digests"] = other_digests(llm, jobs_a)["tok_s"]
        out["b_tok_s_other_digests"] = other_digests(llm, jobs_b)["tok_s"]
        out["a_tok_s_without_digests"] = without_digests(llm, jobs_a)["tok_s"]
        out["b_tok_s_without_digests"] = without_digests(llm, jobs_b)["tok_s"]
        out["alone_check"] = alone_check(llm, jobs_a, a["outputs"], args.sample)
        out["decode_step_profile_b64"] = step_profile(llm, 64)
    out["graphs"] = graph_facts(llm)
    out["steps"] = {"total": llm.engine.num_steps, "ahead": llm.engine.num_steps_ahead}
    return out


def _only_b(llm, build_s: float, jobs_b) -> dict:
    """`--only-b`: workload (b) and the batch-64 decode step, nothing else."""
    b, step_ms = run_engine(llm, jobs_b), decode_step_ms(llm, 64)
    return {"build_s": build_s, "b_tok_s": b["tok_s"], "b_wall_s": b["wall_s"],
            "decode_step_ms_b64": step_ms, "moe_roofline_b64": moe_step_roofline(llm, step_ms),
            "graphs": graph_facts(llm)}  # fmt: skip


def step_profile(llm, batch: int, steps: int = 8, top: int = 30) -> list[str]:
    """cProfile of `steps` engine steps with `batch` requests decoding: the top functions by
    own time (where the host time of a step goes; GPU work shows as the waits)."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    decode_step_ms(llm, batch, steps)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(top)
    return buf.getvalue().splitlines()


def release() -> None:
    """Free the last engine's GPU memory (KV cache, graph pool; its objects hold cycles, so a
    collection is needed) before the next plan is built."""
    import torch

    from samebits.engine.heap import collect_all

    collect_all()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        print(f"after release: {(total - free) / 2**30:.1f} GiB in use", flush=True)


def digest_cost(loaded, args: argparse.Namespace, jobs_a, jobs_b) -> dict:
    """Only the digests' cost on the invariant plan: (a) and (b) with the default digests and
    with no digest work, `args.rounds` times, the order swapped every round (with first in
    even rounds), so a cost of whichever run comes first (a cache, a compile) shows as spread
    and not as digest cost. Per run: tokens/s, the step timeline by kind, the slowest steps and
    the Triton kernels compiled during the run (there should be none)."""
    llm, _ = build_llm(loaded, "invariant", args.device)
    llm.engine.update_runtime_config(device_digests=not args.host_digests)
    run_engine(llm, jobs_b[:4])
    out: dict = {"device_digests": llm.engine.runtime.device_digests, "rounds": []}
    steps = step_timeline(llm.engine)
    for r in range(args.rounds):
        runs = digest_round(llm, {"a": jobs_a, "b": jobs_b}, steps, with_first=r % 2 == 0)
        brief = {k: v if k.endswith("cost") else
                 [round(v["tok_s"]), len(v["compiled"]), sum(ms for _, ms in v["gc_pauses_ms"])]
                 for k, v in runs.items()}  # fmt: skip
        print(
            f"round {r} (tok/s, kernels compiled, ms in gc pauses):", json.dumps(brief), flush=True
        )
        out["rounds"].append(runs)
    for w in ("a", "b"):
        out[f"{w}_tok_s"] = [run[w]["tok_s"] for run in out["rounds"]]
        out[f"{w}_tok_s_without_digests"] = [
            run[f"{w}_without_digests"]["tok_s"] for run in out["rounds"]
        ]
        out[f"{w}_cost"] = [run[f"{w}_cost"] for run in out["rounds"]]
    out["held_outputs"] = llm.engine.num_held_outputs
    return out


def digest_round(llm, workloads: dict, steps: list, with_first: bool) -> dict:
    """Each workload with and without digest work (in that order when `with_first`): per run
    the figures of `timed_run`, and per workload the cost."""
    runs: dict = {}
    for w, jobs in workloads.items():
        for digests in (True, False) if with_first else (False, True):
            runs[w if digests else f"{w}_without_digests"] = timed_run(llm, jobs, digests, steps)
        runs[f"{w}_cost"] = 1 - runs[w]["tok_s"] / runs[f"{w}_without_digests"]["tok_s"]
    return runs


def timed_run(llm, jobs, digests: bool, steps: list) -> dict:
    """One cold run (`steps`: the engine's step timeline, cleared first): tokens/s, the steps
    by kind, the slowest, the Triton kernels compiled and the gc pauses during it."""
    from samebits.kernels.triton.compiles import compile_log

    steps.clear()
    with compile_log() as compiled, gc_log() as pauses:
        tok_s = (run_engine if digests else without_digests)(llm, jobs)["tok_s"]
    return {"tok_s": tok_s, "steps": timeline_summary(steps), "slowest": slowest(steps),
            "compiled": [c[:300] for c in compiled], "gc_pauses_ms": pauses}  # fmt: skip


@contextlib.contextmanager
def gc_log(min_ms: float = 5.0):
    """Yields a list of (generation, ms) of the Python garbage collections of at least
    `min_ms` while the block runs (a full collection of a large heap stalls a step)."""
    import gc

    pauses: list[tuple[int, float]] = []
    started: list[float] = []

    def callback(phase, info):
        if phase == "start":
            started.append(time.perf_counter())
        elif started:
            ms = (time.perf_counter() - started.pop()) * 1e3
            if ms >= min_ms:
                pauses.append((info["generation"], round(ms, 1)))

    gc.callbacks.append(callback)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(callback)


def slowest(
    steps: list[tuple[float, int, int]], count: int = 5
) -> list[tuple[int, float, int, int]]:
    """The `count` slowest steps as (index in the run, ms, batch size, batched tokens)."""
    ranked = sorted(range(len(steps)), key=lambda i: -steps[i][0])[:count]
    return [(i, round(steps[i][0], 1), steps[i][1], steps[i][2]) for i in ranked]


def step_timeline(engine) -> list[tuple[float, int, int]]:
    """Make `engine.step` append (wall ms, batch size, batched tokens) to the returned list
    (a step that ran nothing, e.g. one waiting for held outputs, has batch size 0)."""
    steps: list[tuple[float, int, int]] = []
    step = engine.step

    def timed_step():
        before, tokens = engine.num_steps, engine.num_batched_tokens_total
        start = time.perf_counter()
        outs = step()
        ms = (time.perf_counter() - start) * 1e3
        ran = engine.num_steps > before
        steps.append((ms, engine.last_batch_size if ran else 0,
                      engine.num_batched_tokens_total - tokens))  # fmt: skip
        return outs

    engine.step = timed_step
    return steps


def timeline_summary(steps: list[tuple[float, int, int]]) -> dict:
    """Seconds and step counts by kind: mixed (a prompt chunk: tokens > batch), decode by
    batch size (1-64, 65-128, 129-256), idle (nothing ran: waiting on held outputs)."""
    kinds: dict[str, list[float]] = {}
    for ms, batch, tokens in steps:
        kind = ("idle" if batch == 0 else "mixed" if tokens > batch
                else f"decode_b{'1-64' if batch <= 64 else '65-128' if batch <= 128 else '129-256'}")  # fmt: skip
        kinds.setdefault(kind, []).append(ms)
    return {k: {"steps": len(v), "s": round(sum(v) / 1e3, 3),
                "median_ms": round(sorted(v)[len(v) // 2], 2), "max_ms": round(max(v), 1)}
            for k, v in sorted(kinds.items())}  # fmt: skip


def run(args: argparse.Namespace) -> dict:
    import torch

    from samebits.model.random_init import random_model

    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    loaded = random_model(args.preset, seed=0, device=args.device, dtype=dtype)
    vocab = loaded.config.vocab_size
    jobs_a = workload_a(vocab, args.requests, args.quick)
    jobs_b = workload_b(vocab, args.quick)
    result: dict = {"preset": args.preset, "device": args.device, "quick": args.quick}
    if args.digest_cost:
        result["digest_cost"] = digest_cost(loaded, args, jobs_a, jobs_b)
        return result
    modes = {"on": (False,), "off": (True,), "both": (False, True)}[args.graphs]
    for plan in ("invariant", "fast"):
        for eager in modes:
            key = plan if eager == modes[0] else f"{plan}_eager"
            result[key] = run_plan(loaded, plan, args, jobs_a, jobs_b, eager)
            release()
            print(key, json.dumps(result[key]), flush=True)
    caches = () if args.no_hf else tuple(args.hf_caches.split(","))
    if caches:
        result.update(hf_runs(loaded, jobs_b, args.device, caches))
    return result


def hf_runs(loaded, jobs, device: str, caches: Sequence[str]) -> dict:
    """HF `generate` of workload (b) per cache mode, on one HF model of the same weights
    (built last: a mixture of experts' stacked experts consume `loaded`'s, see `hf_moe`)."""
    import torch
    from gpu_agreement import hf_model

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = hf_model(loaded, device, dtype, consume=loaded.config.moe is not None)
    out = {}
    for cache in caches:
        key = "hf" if cache == "dynamic" else f"hf_{cache}"
        out[key] = _guarded_hf(model, jobs, device, cache)
        print(key, json.dumps(out[key]), flush=True)
    del model
    release()
    return out


def _guarded_hf(model, jobs, device: str, cache: str) -> dict:
    """`hf_throughput`, or the error it raised (an HF cache mode failing is a result, not a
    reason to lose the run)."""
    try:
        return hf_throughput(model, jobs, device, cache)
    except Exception as exc:  # noqa: BLE001 - reported in the JSON
        return {"cache": cache, "error": f"{type(exc).__name__}: {exc}"}


def summary(r: dict) -> dict:
    inv, fast = r["invariant"], r["fast"]
    if "a_tok_s" not in inv:  # --only-b
        return {"invariant_over_fast_b": inv["b_tok_s"] / fast["b_tok_s"], **_hf_ratios(r)}
    out = {
        "invariant_over_fast_a": inv["a_tok_s"] / fast["a_tok_s"],
        "invariant_over_fast_b": inv["b_tok_s"] / fast["b_tok_s"],
        "digest_cost_a": 1 - inv["a_tok_s"] / inv["a_tok_s_without_digests"],
        "digest_cost_b": 1 - inv["b_tok_s"] / inv["b_tok_s_without_digests"],
        "other_digest_cost_a": 1 - inv["a_tok_s_other_digests"] / inv["a_tok_s_without_digests"],
        "other_digest_cost_b": 1 - inv["b_tok_s_other_digests"] / inv["b_tok_s_without_digests"],
        "alone_mismatches": len(inv["alone_check"]["mismatching"]),
        "async_over_sync_scheduling_b": inv["b_tok_s"] / inv["b_tok_s_sync_scheduling"],
        "lookahead_over_without_b": inv["b_tok_s"] / inv["b_tok_s_without_lookahead"],
        "invariant_graphs": inv["graphs"],
    }
    if "invariant_eager" in r:
        for w in ("a", "b"):
            out[f"invariant_graphs_over_eager_{w}"] = (
                inv[f"{w}_tok_s"] / r["invariant_eager"][f"{w}_tok_s"]
            )
        out["invariant_eager_alone_mismatches"] = len(
            r["invariant_eager"]["alone_check"]["mismatching"]
        )
    return {**out, **_hf_ratios(r)}


def _hf_ratios(r: dict) -> dict:
    """Invariant (b) over HF's, and (MoE) each plan's batch-64 step against its roofline."""
    inv = r["invariant"]
    out = {f"invariant_over_{key}_b": inv["b_tok_s"] / r[key]["tok_s"]
           for key in ("hf", "hf_static") if "tok_s" in r.get(key, {})}  # fmt: skip
    for plan in ("invariant", "fast"):
        moe = r.get(plan, {}).get("moe_roofline_b64")
        if moe:
            out[f"{plan}_b64_step_of_expert_roofline"] = moe["fraction_of_expert_roofline"]
    return out


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="llama-3-8b")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    p.add_argument("--requests", type=int, default=256, help="workload (a) size")
    p.add_argument("--sample", type=int, default=32, help="requests of (a) replayed alone")
    p.add_argument("--quick", action="store_true", help="prompts and outputs / 8, (b) 32 new")
    p.add_argument("--no-hf", action="store_true", help="skip HF transformers generate")
    p.add_argument("--only-b", action="store_true",
                   help="each plan runs workload (b) and the batch-64 step only (no (a), no "
                        "digest / scheduling variants, no alone check)")  # fmt: skip
    p.add_argument("--hf-caches", default="dynamic,static",
                   help="HF runs: dynamic (eager HF) and/or static (its static KV cache, "
                        "compiled by transformers on cuda)")  # fmt: skip
    p.add_argument("--graphs", default="on", choices=("on", "off", "both"),
                   help="cuda decode graphs: on (default), off (enforce_eager), both ways")  # fmt: skip
    p.add_argument("--host-digests", action="store_true",
                   help="unstreamed outputs' rows hashed on the host (default: the device SHA-256)")  # fmt: skip
    p.add_argument("--digest-cost", action="store_true",
                   help="only the invariant plan's (a) and (b) with and without digests")  # fmt: skip
    p.add_argument("--rounds", type=int, default=2,
                   help="--digest-cost: rounds of with / without, the order swapped each round")  # fmt: skip
    common.add_kernel_knobs(p)
    p.add_argument("--out", default=None)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    common.apply_kernel_knobs(args)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("samebits.graphs").setLevel(logging.INFO)  # capture time, fallbacks
    result = run(args)
    out = Path(args.out or Path(os.environ.get("OUT", "."), "gpu_serving.json"))
    if args.digest_cost:
        out.write_text(json.dumps(result, indent=1))
        print(json.dumps({k: v for k, v in result["digest_cost"].items() if k != "rounds"}))
        return 0
    result["summary"] = summary(result)
    print(json.dumps(result["summary"], indent=1))
    out.write_text(json.dumps(result, indent=1, default=str))
    summary_ok = result["summary"].get("invariant_eager_alone_mismatches", 0) == 0
    return 0 if result["summary"].get("alone_mismatches", 0) == 0 and summary_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
