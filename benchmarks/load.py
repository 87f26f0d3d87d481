"""Load test: N concurrent streaming clients against `samebits serve` on loopback.

The server runs in this process (uvicorn in a thread) over an engine whose KV cache is small
enough to force preemptions, with an audit log. Every client streams one request (a mix of
completions and chat, greedy and sampled, with and without stop strings). Afterwards every
output is checked bit for bit against its isolated run: each audit entry is replayed alone
on a second, cold engine of the same deployment (`samebits.audit.replay`), and the tokens
and logits digests each client received over SSE must equal its audit entry.

Reports throughput, time-to-first-token and latency percentiles, errors, preemptions and
mismatches; exit code 1 on any error or mismatch.

    PYTHONPATH=src python benchmarks/load.py --clients 256 --model tiny
    PYTHONPATH=src python benchmarks/load.py --clients 64            # the embedded SmolLM2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from samebits.audit import AuditLogWriter, read_log
from samebits.audit.replay import replay_entry
from samebits.engine.engine import LLMEngine
from samebits.model.loader import load_model
from samebits.server.app import build_app
from samebits.server.config import ServerConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ServerThread  # noqa: E402

TOPICS = ("the sea", "a clock", "mountains", "bread", "a robot", "the moon", "rivers", "chess")


@dataclass
class ClientResult:
    index: int
    ok: bool = False
    error: str = ""
    ttft: float = 0.0
    latency: float = 0.0
    token_ids: list[int] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    entry_hashes: list[str] = field(default_factory=list)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--model", default=None, help="model path, 'tiny' (random test llama), or default"
    )
    p.add_argument("--clients", type=int, default=256)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument("--max-num-batched-tokens", type=int, default=512)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--num-kv-blocks", type=int, default=48, help="small, to force preemptions")
    p.add_argument("--num-threads", type=int, default=None)
    p.add_argument("--json", type=Path, default=None, help="also write the numbers here")
    return p.parse_args()


def resolve_model(name: str | None, workdir: Path) -> str | None:
    if name != "tiny":
        return name
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from tiny_models import make_tiny_checkpoint

    return str(make_tiny_checkpoint(workdir / "tiny_llama", "llama"))


def make_bodies(count: int, max_tokens: int) -> list[tuple[str, dict]]:
    bodies = []
    for i in range(count):
        topic = TOPICS[i % len(TOPICS)]
        body = {
            "max_tokens": max_tokens - i % 4,
            "temperature": (0.0, 0.7, 1.0)[i % 3],
            "seed": 10_000 + i,
            "stream": True,
            "ignore_eos": i % 5 != 0,
        }
        if i % 7 == 3:
            body["stop"] = [" the", "."]
        if i % 2:
            body["messages"] = [{"role": "user", "content": f"Write about {topic} ({i})."}]
            bodies.append(("/v1/chat/completions", body))
        else:
            body["prompt"] = f"A short note about {topic}, number {i}:"
            bodies.append(("/v1/completions", body))
    return bodies


async def one_client(client: httpx.AsyncClient, index: int, path: str, body: dict) -> ClientResult:
    result = ClientResult(index)
    start = time.perf_counter()
    try:
        async with client.stream("POST", path, json=body) as response:
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {(await response.aread())[:200]!r}"
                return result
            async for line in response.aiter_lines():
                _absorb(result, line, start)
        result.ok = result.latency > 0 and not result.error
    except (httpx.HTTPError, ValueError) as exc:
        result.error = f"{type(exc).__name__}: {exc}"
    return result


def _absorb(result: ClientResult, line: str, start: float) -> None:
    if not line.startswith("data: {"):
        return
    chunk = json.loads(line[6:])
    if "error" in chunk:
        result.error = chunk["error"]["message"]
        return
    for choice in chunk["choices"]:
        ext = choice.get("samebits")
        if ext is None:
            continue
        if ext["token_ids"] and not result.ttft:
            result.ttft = time.perf_counter() - start
        result.token_ids += ext["token_ids"]
        result.digests += ext["logits_digests"]
        if choice.get("finish_reason"):
            result.latency = time.perf_counter() - start
            if ext.get("audit"):
                result.entry_hashes.append(ext["audit"]["entry_hash"])


async def run_clients(url: str, bodies: list[tuple[str, dict]]) -> tuple[list[ClientResult], float]:
    limits = httpx.Limits(max_connections=len(bodies) + 8, max_keepalive_connections=len(bodies))
    async with httpx.AsyncClient(base_url=url, timeout=3600, limits=limits) as client:
        start = time.perf_counter()
        results = await asyncio.gather(
            *(one_client(client, i, p, b) for i, (p, b) in enumerate(bodies))
        )
        return list(results), time.perf_counter() - start


def check_isolated(log_path: Path, results: list[ClientResult], engine: LLMEngine) -> list[str]:
    """Mismatches: a replay alone that differs, or a client stream that differs from its entry."""
    entries = {e.entry["entry_hash"]: e for e in read_log(log_path).entries}
    problems = []
    for result in results:
        if not result.ok:
            continue
        logged = entries.get(result.entry_hashes[0]) if result.entry_hashes else None
        if logged is None:
            problems.append(f"client {result.index}: no audit entry")
            continue
        if (logged.entry["output_token_ids"], logged.entry["logits_digests"]) != (
            result.token_ids,
            result.digests,
        ):
            problems.append(f"client {result.index}: stream differs from its audit entry")
        verdict = replay_entry(engine, logged)
        if not verdict.ok:
            problems.append(f"client {result.index}: isolated run differs: {verdict.message}")
    return problems


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def main() -> int:
    args = parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="samebits-load-"))
    loaded = load_model(resolve_model(args.model, workdir))
    engine = LLMEngine.from_loaded(
        loaded, num_threads=args.num_threads, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, block_size=args.block_size,
        num_kv_blocks=args.num_kv_blocks,
    )  # fmt: skip
    writer = AuditLogWriter(workdir / "audit.jsonl")
    app = build_app(engine, ServerConfig(model_names=("load",), max_tokens_limit=4096), writer)
    bodies = make_bodies(args.clients, args.max_tokens)
    with ServerThread(app) as url:
        results, wall = asyncio.run(run_clients(url, bodies))
    writer.close()
    stats = engine.stats()
    print(
        f"served {len(results)} clients in {wall:.2f} s; checking each against its isolated run ...",
        flush=True,
    )
    isolated = LLMEngine.from_loaded(
        loaded, num_threads=args.num_threads, enable_prefix_caching=False
    )
    t0 = time.perf_counter()
    mismatches = check_isolated(writer.path, results, isolated)
    numbers = summarize(args, results, wall, stats, mismatches, engine, time.perf_counter() - t0)
    print(json.dumps(numbers, indent=2))
    for line in [r.error for r in results if not r.ok][:10] + mismatches[:10]:
        print("  " + line)
    if args.json:
        args.json.write_text(json.dumps(numbers, indent=2) + "\n")
    return 0 if numbers["errors"] == 0 and numbers["mismatches"] == 0 else 1


def summarize(args, results, wall, stats, mismatches, engine, check_s) -> dict:
    good = [r for r in results if r.ok]
    tokens = sum(len(r.token_ids) for r in good)
    return {
        "model": engine.model_name,
        "fingerprint": engine.fingerprint[:16],
        "clients": len(results),
        "errors": len(results) - len(good),
        "mismatches": len(mismatches),
        "preemptions": stats.get("num_preemptions"),
        "prefix_cache_hits_tokens": stats.get("prefix_cache_hits"),
        "engine_steps": stats.get("num_steps"),
        "generated_tokens": tokens,
        "wall_s": round(wall, 2),
        "throughput_tok_s": round(tokens / wall, 1),
        "requests_s": round(len(good) / wall, 2),
        "ttft_p50_s": round(percentile([r.ttft for r in good], 0.5), 3),
        "ttft_p99_s": round(percentile([r.ttft for r in good], 0.99), 3),
        "latency_p50_s": round(percentile([r.latency for r in good], 0.5), 3),
        "latency_p99_s": round(percentile([r.latency for r in good], 0.99), 3),
        "latency_mean_s": round(statistics.fmean([r.latency for r in good]), 3) if good else None,
        "isolated_check_s": round(check_s, 1),
        "settings": {
            "max_tokens": args.max_tokens,
            "max_num_seqs": args.max_num_seqs,
            "max_num_batched_tokens": args.max_num_batched_tokens,
            "block_size": args.block_size,
            "num_kv_blocks": args.num_kv_blocks,
            "num_threads": args.num_threads,
        },
        "machine": f"{platform.machine()} {platform.processor() or ''} ({__import__('os').cpu_count()} cores)".strip(),
        "date": time.strftime("%Y-%m-%d"),
    }


if __name__ == "__main__":
    raise SystemExit(main())
