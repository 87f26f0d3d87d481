"""Request-rate sweep through the HTTP server (issue 13 (c)): open-loop Poisson arrivals at
each rate, every request a streaming `/v1/completions` call, TTFT and inter-token latency
p50/p99 per rate, for the invariant plan and the fast plan side by side in one run.

The server is `samebits.server.app.build_app` under uvicorn in a thread of this process,
over one `LLMEngine` per plan (built one after the other; the first engine's GPU memory is
freed before the second is built). The model is a random-weight preset
(`samebits.model.random_init`, bfloat16 on cuda) or `--model PATH`. Engine options are the
flags of `samebits serve` (`samebits.engine_args`), with gpu_serving.py's defaults:
gpu_memory_utilization 0.85, max_num_seqs 256, max_num_batched_tokens 8192, decode CUDA
graphs on cuda (`--enforce-eager` turns them off).

Clients run in a separate (spawned) process, so their parsing does not share the server's
GIL: httpx async streaming, one request per Poisson arrival (seeded; the same arrivals and
requests for every plan). A request: a prompt of random token ids (128-1024), `max_tokens`
128-256, greedy, `ignore_eos` (so every request generates exactly `max_tokens`).
  TTFT: from just before the request is sent to the first SSE chunk that carries a token
        (`samebits.token_ids` non-empty; a chunk's text may be empty while bytes of a
        character are held back).
  ITL:  the gap between successive token-carrying chunks. The server sends one chunk per
        engine step and request, which is one token; a chunk of k > 1 tokens (counted as
        `multi_token_chunks`) would count as k gaps of (gap / k). Chunks that reach the
        client in one read show gaps near 0, as a real client sees them.
Requests per rate: rate * --duration-s, capped at --max-requests (4 -> 80, 16 -> 256,
64 -> 256 by default), or --requests for every rate. Warm-up requests (--warmup, of the
workload's sizes, all at once) run before each plan is timed. Writes JSON to --out
(default $OUT/server_rate_sweep.json, else ./server_rate_sweep.json) with the machine, the
command line, the settings and every number, and prints a table.

    python benchmarks/server_rate_sweep.py                                # H200, llama-3-8b
    bash benchmarks/gpu_session.sh rate                   # the same, as a device-machine job
    python benchmarks/server_rate_sweep.py --rates 4 16 64 --duration-s 20 --max-requests 256
    python benchmarks/server_rate_sweep.py --preset tiny-llama --device cpu --quick \\
        --requests 12 --rates 4 16                                        # CPU dry run
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import json
import math
import multiprocessing
import os
import platform
import random
import shlex
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parent.parent / "src"
if str(SRC) not in sys.path:
    sys.path.insert(0, str(SRC))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ServerThread  # noqa: E402

PLANS = ("invariant", "fast")
ENGINE_DEFAULTS = {
    "device": "cuda",
    "gpu_memory_utilization": 0.85,
    "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
}


@dataclass(frozen=True)
class Job:
    """One request: its prompt ids, its output length, its send time after the start (s)."""

    prompt: list[int]
    max_tokens: int
    offset_s: float


@dataclass
class Record:
    """What the client saw of one request (times in seconds from the sweep's start)."""

    prompt_len: int
    max_tokens: int
    scheduled_s: float
    sent_s: float = 0.0
    ttft_s: float = math.nan
    end_s: float = math.nan
    tokens: int = 0
    chunks: int = 0
    multi_token_chunks: int = 0
    itls_s: list[float] = field(default_factory=list)
    error: str = ""

    @property
    def ok(self) -> bool:
        return not self.error and self.tokens == self.max_tokens


# ---------------------------------------------------------------- workload


def make_jobs(vocab: int, count: int, rate: float, quick: bool, seed: int) -> list[Job]:
    """`count` requests with Poisson arrivals at `rate` per second (seeded); prompts 128-1024
    tokens, outputs 128-256 (quick: both / 8)."""
    rng = random.Random(seed)
    scale = 8 if quick else 1
    jobs, t = [], 0.0
    for _ in range(count):
        n = rng.randint(128, 1024) // scale
        prompt = [rng.randrange(vocab - 3) for _ in range(n)]
        jobs.append(Job(prompt, rng.randint(128, 256) // scale, t))
        t += rng.expovariate(rate)
    return jobs


def requests_for(rate: float, args: argparse.Namespace) -> int:
    if args.requests is not None:
        return args.requests
    return max(1, min(args.max_requests, round(rate * args.duration_s)))


def request_body(job: Job, index: int, temperature: float) -> dict[str, Any]:
    return {
        "prompt": job.prompt,
        "max_tokens": job.max_tokens,
        "temperature": temperature,
        "seed": index,
        "ignore_eos": True,
        "stream": True,
    }


# ---------------------------------------------------------------- client (own process)


def run_clients(url: str, jobs: list[Job], temperature: float, timeout_s: float) -> list[dict]:
    """Entry point of the client process: every job sent at its offset; one dict per job."""
    records = asyncio.run(_send_all(url, jobs, temperature, timeout_s))
    return [asdict(r) for r in records]


async def _send_all(url: str, jobs: list[Job], temperature: float, timeout_s: float) -> list:
    import httpx

    limits = httpx.Limits(max_connections=len(jobs) + 8, max_keepalive_connections=len(jobs))
    timeout = httpx.Timeout(timeout_s, connect=30.0)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        start = time.perf_counter()
        tasks = [_one_request(client, i, job, temperature, start) for i, job in enumerate(jobs)]
        return list(await asyncio.gather(*tasks))


async def _one_request(client: Any, index: int, job: Job, temperature: float, start: float):
    import httpx

    record = Record(len(job.prompt), job.max_tokens, job.offset_s)
    await asyncio.sleep(max(0.0, start + job.offset_s - time.perf_counter()))
    sent = time.perf_counter()
    record.sent_s = sent - start
    last = None
    try:
        body = request_body(job, index, temperature)
        async with client.stream("POST", "/v1/completions", json=body) as response:
            if response.status_code != 200:
                text = (await response.aread())[:200]
                record.error = f"HTTP {response.status_code}: {text!r}"
                return record
            async for line in response.aiter_lines():
                last = _absorb(record, line, sent, last)
        record.end_s = time.perf_counter() - start
        if not record.error and record.tokens != job.max_tokens:
            record.error = f"{record.tokens} tokens of {job.max_tokens}"
    except (httpx.HTTPError, ValueError, KeyError) as exc:
        record.error = f"{type(exc).__name__}: {exc}"
    return record


def _absorb(record: Record, line: str, sent: float, last: float | None) -> float | None:
    """Fold one SSE line in; returns the time of the last token-carrying chunk."""
    if not line.startswith("data: {"):
        return last
    now = time.perf_counter()
    chunk = json.loads(line[6:])
    if "error" in chunk:
        record.error = str(chunk["error"].get("message", chunk["error"]))[:200]
        return last
    k = sum(len(c["samebits"]["token_ids"]) for c in chunk["choices"])
    if k == 0:
        return last
    record.tokens += k
    record.chunks += 1
    record.multi_token_chunks += k > 1
    if last is None:
        record.ttft_s = now - sent
    else:
        record.itls_s.extend([(now - last) / k] * k)
    return now


# ---------------------------------------------------------------- server and engine


def load_weights(args: argparse.Namespace, cfg: Any) -> Any:
    """The model every plan serves: `--model PATH`, else a random-weight preset."""
    import torch

    mc = cfg.model_config
    mc.check_device()  # a clear error where the device is missing
    if args.model is not None:
        from samebits.model.loader import load_model, weights_target

        return load_model(args.model, weights_to=weights_target(mc.device, mc.dtype))
    from samebits.model.random_init import random_model

    return random_model(args.preset, seed=0, device=mc.device, dtype=getattr(torch, mc.dtype))


def build_engine(loaded: Any, cfg: Any) -> tuple[Any, float]:
    """The plan's engine (decode graphs captured here on cuda) and its build seconds."""
    from samebits.engine.engine import LLMEngine

    start = time.perf_counter()
    engine = LLMEngine.from_loaded(loaded, config=cfg)
    return engine, time.perf_counter() - start


def build_server_app(engine: Any, args: argparse.Namespace, workdir: Path) -> tuple[Any, Any]:
    """The app (and its audit writer when --audit-log; the caller closes it)."""
    from samebits.server.app import build_app
    from samebits.server.config import ServerConfig

    writer = None
    if args.audit_log:
        from samebits.audit import AuditLogWriter

        writer = AuditLogWriter(workdir / f"audit-{engine.config.model_config.kernel_plan}.jsonl")
    return build_app(engine, ServerConfig(model_names=("bench",)), writer), writer


def engine_facts(engine: Any, build_s: float) -> dict[str, Any]:
    graphs = getattr(engine.runner, "graphs", None)
    facts: dict[str, Any] = {
        "fingerprint": str(engine.fingerprint),
        "build_s": round(build_s, 2),
        "engine_config": engine.config.to_kwargs() if engine.config is not None else None,
        "max_model_len": int(engine.max_model_len),
        "async_scheduling": bool(getattr(engine, "async_scheduling", False)),
        "cuda_graphs": graphs is not None,
    }
    if graphs is not None:
        facts["graph_capture_s"] = round(graphs.capture_seconds, 2)
    return facts


def release() -> str:
    """Free the last engine's GPU memory (its objects hold cycles: collect, then empty the
    cache); returns what is still in use."""
    import torch

    from samebits.engine.heap import collect_all

    collect_all()  # engines freeze their start-up heap
    if not torch.cuda.is_available():
        return "cpu"
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    return f"{(total - free) / 2**30:.1f} GiB in use"


# ---------------------------------------------------------------- statistics


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (q in [0, 1]); nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = q * (len(ordered) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def ms(value: float) -> float | None:
    return None if math.isnan(value) else round(value * 1e3, 2)


def summarize(records: list[Record], rate: float, engine_delta: dict[str, float]) -> dict:
    """The numbers of one rate: counts, rates, throughput, TTFT / ITL / latency percentiles."""
    good = [r for r in records if r.ok]
    first = min((r.sent_s for r in records), default=0.0)
    ends = [r.end_s for r in records if not math.isnan(r.end_s)]
    duration = max(ends, default=first) - first
    ttfts = [r.ttft_s for r in good]
    itls = [x for r in good for x in r.itls_s]
    e2e = [r.end_s - r.sent_s for r in good]
    tokens = sum(r.tokens for r in records)
    span = max((r.scheduled_s for r in records), default=0.0)
    out = {
        "rate": rate,
        "requests": len(records),
        "completed": len(good),
        "errors": len(records) - len(good),
        "offered_rate": round((len(records) - 1) / span, 2) if span > 0 else None,
        "achieved_rate": round(len(good) / duration, 2) if duration > 0 else None,
        "output_tokens": tokens,
        "output_tok_s": round(tokens / duration, 1) if duration > 0 else None,
        "duration_s": round(duration, 2),
        "max_send_lag_ms": ms(max((r.sent_s - r.scheduled_s for r in records), default=0.0)),
        "multi_token_chunks": sum(r.multi_token_chunks for r in records),
        "chunks": sum(r.chunks for r in records),
        "itl_samples": len(itls),
    }
    for name, values in (("ttft", ttfts), ("itl", itls), ("e2e", e2e)):
        for q in (50, 90, 99):
            out[f"{name}_p{q}_ms"] = ms(percentile(values, q / 100))
        out[f"{name}_mean_ms"] = ms(sum(values) / len(values)) if values else None
    out["error_samples"] = sorted({r.error for r in records if r.error})[:5]
    out["engine"] = engine_delta
    return out


def stats_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    keys = ("num_steps", "num_preemptions", "num_batched_tokens_total", "graph_steps",
            "eager_steps", "prefix_cache_hits")  # fmt: skip
    return {k: after[k] - before.get(k, 0) for k in keys if k in after}


def request_rows(records: list[Record]) -> list[dict]:
    """Per request, compact (no ITL lists): for the JSON."""
    rows = []
    for r in records:
        itl_mean = sum(r.itls_s) / len(r.itls_s) if r.itls_s else math.nan
        rows.append({
            "prompt_len": r.prompt_len, "max_tokens": r.max_tokens, "tokens": r.tokens,
            "sent_s": round(r.sent_s, 4), "ttft_ms": ms(r.ttft_s), "itl_mean_ms": ms(itl_mean),
            "itl_max_ms": ms(max(r.itls_s, default=math.nan)),
            "e2e_ms": ms(r.end_s - r.sent_s), "error": r.error,
        })  # fmt: skip
    return rows


# ---------------------------------------------------------------- the sweep


def run_rate(pool: Any, url: str, engine: Any, jobs: list[Job], rate: float, args) -> dict:
    """One rate against the running server: the client process sends `jobs`."""
    before = engine.stats()
    future = pool.submit(run_clients, url, jobs, args.temperature, args.request_timeout)
    records = [Record(**d) for d in future.result()]
    result = summarize(records, rate, stats_delta(before, engine.stats()))
    if args.per_request:
        result["per_request"] = request_rows(records)
    return result


def warm_up(pool: Any, url: str, vocab: int, args: argparse.Namespace) -> dict:
    """`--warmup` requests at once (prompt and output sizes of the workload), untimed."""
    jobs = make_jobs(vocab, args.warmup, 1e9, args.quick, seed=999)
    records = [
        Record(**d) for d in pool.submit(run_clients, url, jobs, args.temperature, 600.0).result()
    ]
    errors = sorted({r.error for r in records if r.error})
    return {"requests": len(records), "errors": errors}


def run_plan(plan: str, loaded: Any, cfg: Any, workloads: dict, pool: Any, args) -> dict:
    """Build the plan's engine and server, warm up, sweep every rate, tear down."""
    engine, build_s = build_engine(loaded, cfg.replace(kernel_plan=plan))
    out: dict[str, Any] = {"engine": engine_facts(engine, build_s), "rates": []}
    app, writer = build_server_app(engine, args, Path(args.workdir))
    vocab = int(engine.vocab_size)
    with ServerThread(app) as url:
        out["warmup"] = warm_up(pool, url, vocab, args)
        for rate, jobs in workloads.items():
            result = run_rate(pool, url, engine, jobs, rate, args)
            out["rates"].append(result)
            print(row_text(plan, result), flush=True)
    if writer is not None:
        writer.close()
    out["engine"]["stats_end"] = engine.stats()
    del engine, app, writer
    out["after_release"] = release()
    return out


def machine_info() -> dict[str, Any]:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {
        "gpu": gpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "git_commit": git_commit(),
    }


def git_commit() -> str | None:
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=SRC.parent, timeout=10, check=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return head.stdout.strip() or None


def run(args: argparse.Namespace) -> dict:
    from samebits.engine_args import config_from_args

    cfg = config_from_args(args)
    loaded = load_weights(args, cfg)
    vocab = int(loaded.config.vocab_size)
    workloads = {
        rate: make_jobs(vocab, requests_for(rate, args), rate, args.quick, seed=args.seed + i)
        for i, rate in enumerate(args.rates)
    }
    result: dict[str, Any] = {
        "machine": machine_info(),
        "command": shlex.join([sys.executable, *sys.argv]),
        "settings": settings(args, cfg),
        "plans": {},
    }
    print(table_head(), flush=True)
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(1, mp_context=spawn) as pool:
        for plan in args.plans:
            result["plans"][plan] = run_plan(plan, loaded, cfg, workloads, pool, args)
    result["summary"] = side_by_side(result["plans"])
    return result


def settings(args: argparse.Namespace, cfg: Any) -> dict[str, Any]:
    return {
        "model": args.model or f"random:{args.preset}",
        "plans": list(args.plans),
        "rates": list(args.rates),
        "requests_per_rate": {str(r): requests_for(r, args) for r in args.rates},
        "prompt_tokens": [16, 128] if args.quick else [128, 1024],
        "max_tokens": [16, 32] if args.quick else [128, 256],
        "temperature": args.temperature,
        "ignore_eos": True,
        "warmup_requests": args.warmup,
        "seed": args.seed,
        "audit_log": args.audit_log,
        "engine_config": {k: v for k, v in cfg.to_kwargs().items() if k != "kernel_plan"},
        "client": "httpx async streaming in a spawned process, open-loop Poisson arrivals",
    }


def side_by_side(plans: dict[str, dict]) -> list[dict]:
    """Per rate: each plan's headline numbers, and invariant / fast ratios when both ran."""
    keys = ("output_tok_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")
    by_rate: dict[float, dict] = {}
    for plan, res in plans.items():
        for r in res["rates"]:
            by_rate.setdefault(r["rate"], {"rate": r["rate"]})[plan] = {k: r[k] for k in keys}
    for row in by_rate.values():
        if "invariant" in row and "fast" in row:
            row["invariant_over_fast"] = {
                k: round(row["invariant"][k] / row["fast"][k], 3)
                for k in keys
                if row["invariant"][k] and row["fast"][k]
            }
    return list(by_rate.values())


# ---------------------------------------------------------------- output


COLUMNS = (
    ("plan", 9), ("rate", 5), ("req", 4), ("done", 4), ("err", 3), ("ach r/s", 7),
    ("out tok/s", 9), ("TTFT p50", 8), ("TTFT p99", 8), ("ITL p50", 7), ("ITL p99", 7),
    ("dur s", 6),
)  # fmt: skip


def row_text(plan: str, r: dict) -> str:
    cells = (plan, f"{r['rate']:g}", r["requests"], r["completed"], r["errors"],
             r["achieved_rate"], r["output_tok_s"], r["ttft_p50_ms"], r["ttft_p99_ms"],
             r["itl_p50_ms"], r["itl_p99_ms"], r["duration_s"])  # fmt: skip
    return " ".join(
        f"{'-' if c is None else c!s:>{w}}" for c, (_, w) in zip(cells, COLUMNS, strict=True)
    )


def table_head() -> str:
    return " ".join(f"{name:>{w}}" for name, w in COLUMNS) + "   (latencies in ms)"


def table(result: dict) -> str:
    lines = [table_head()]
    for plan, res in result["plans"].items():
        lines += [row_text(plan, r) for r in res["rates"]]
    return "\n".join(lines)


def out_path(args: argparse.Namespace) -> Path:
    if args.out:
        return Path(args.out)
    return Path(os.environ.get("OUT") or ".", "server_rate_sweep.json")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    from samebits.engine_args import add_engine_arguments

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_engine_arguments(p)  # the flags of `samebits serve` (--device, --max-num-seqs, ...)
    p.set_defaults(kernel_plan=None, **ENGINE_DEFAULTS)
    add = p.add_argument
    add("--preset", default="llama-3-8b", help="random-weight preset (unless --model)")
    add("--plans", nargs="+", choices=PLANS, default=list(PLANS), help="in this order")
    add("--rates", nargs="+", type=float, default=[4.0, 16.0, 64.0], help="requests/s")
    add("--duration-s", type=float, default=20.0, help="requests per rate: rate * this ...")
    add("--max-requests", type=int, default=256, help="... capped at this")
    add("--requests", type=int, default=None, help="requests per rate (overrides the above)")
    add("--warmup", type=int, default=16, help="warm-up requests per plan (untimed)")
    add("--quick", action="store_true", help="prompts 16-128 tokens, outputs 16-32")
    add("--temperature", type=float, default=0.0, help="0: greedy")
    add("--seed", type=int, default=0, help="workload seed (arrivals, prompts, lengths)")
    add("--audit-log", action="store_true", help="serve with an audit log (in a temp dir)")
    add("--request-timeout", type=float, default=600.0, metavar="S")
    add("--per-request", action="store_true", help="also write every request's numbers")
    add("--out", default=None, help="JSON path (default $OUT/server_rate_sweep.json)")
    args = p.parse_args(argv)
    if args.kernel_plan is not None:
        p.error("--kernel-plan: this benchmark runs --plans (default: invariant fast)")
    return args


def main(argv: list[str] | None = None) -> int:
    import logging
    import tempfile

    args = parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    args.workdir = tempfile.mkdtemp(prefix="samebits-rate-")
    result = run(args)
    path = out_path(args)
    path.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(table(result))
    print(f"wrote {path}")
    errors = sum(r["errors"] for p in result["plans"].values() for r in p["rates"])
    return 0 if errors == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
