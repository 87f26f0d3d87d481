"""Continuous-batching CPU benchmark: samebits (invariant plan, fast plan) against HF
transformers batch generation.

SmolLM2-135M (embedded GGUF, float32), `--num-requests` distinct random prompts of
`--prompt-len` tokens, greedy, exactly `--max-tokens` outputs each. samebits gets all requests
in one `LLM.generate` call (max_num_seqs >= num_requests, a token budget of
`--max-num-batched-tokens`); HF gets one left-padded batch with an attention mask.
Tokens/s = num_requests * max_tokens / wall time. Systems are timed in this one process,
interleaved round-robin, each warmed up first; every repetition uses fresh prompts.

Spot check (invariant plan): the first `--spot-check` requests of the first repetition are
re-run alone on a fresh engine (same deployment, cold cache, no prefix caching) and must give
the same token ids and the same logits digests, bit for bit.

    PYTHONPATH=src python benchmarks/batching.py
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import Timings  # noqa: E402

SYSTEMS = ("invariant", "fast", "hf")
SECTION = "CPU continuous batching (issue 3)"
TARGET = 2.0  # invariant tokens/s over HF tokens/s
WARMUP_TOKENS = 4


@dataclass(frozen=True)
class Args:
    threads: int
    num_requests: int
    prompt_len: int
    max_tokens: int
    max_num_batched_tokens: int
    reps: int
    seed: int
    spot_check: int
    write: bool
    profile: str | None


@dataclass(frozen=True)
class BatchRun:
    """One timed batch: wall time, and per request its token ids and logits digests
    (digests are empty for HF)."""

    wall_s: float
    token_ids: list[list[int]]
    digests: list[list[str]]

    def tokens_per_s(self) -> float:
        return sum(len(t) for t in self.token_ids) / self.wall_s


# ---------------------------------------------------------------------------- systems
class SamebitsSystem:
    """samebits `LLM` with one kernel plan, sized so every request runs concurrently."""

    def __init__(self, plan: str, args: Args):
        from samebits import LLM

        self.llm = LLM(
            kernel_plan=plan, num_threads=args.threads, max_num_seqs=max(16, args.num_requests),
            max_num_batched_tokens=args.max_num_batched_tokens,
        )  # fmt: skip

    def generate(self, prompts: list[list[int]], max_tokens: int) -> BatchRun:
        from samebits import SamplingParams

        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        wall, outs = common.timed(lambda: self.llm.generate(prompts, params))
        ids = [list(o.outputs[0].token_ids) for o in outs]
        return BatchRun(wall, ids, [list(o.outputs[0].logits_digests) for o in outs])


class HFSystem:
    def __init__(self, args: Args):
        self.model = common.load_hf_model(args.threads)
        self.threads = args.threads

    def generate(self, prompts: list[list[int]], max_tokens: int) -> BatchRun:
        run = lambda: common.hf_generate(self.model, prompts, max_tokens, self.threads)  # noqa: E731
        wall, result = common.timed(run)
        return BatchRun(wall, result.token_ids, [[] for _ in prompts])


def make_system(name: str, args: Args):
    return HFSystem(args) if name == "hf" else SamebitsSystem(name, args)


# ---------------------------------------------------------------------------- timing
def time_systems(args: Args, systems: dict) -> tuple[Timings, list[list[int]]]:
    """Warm up each system on its own batch, then time one fresh batch per repetition per
    system, rotating which system goes first."""
    n = args.num_requests
    prompts = common.random_prompts(n * (args.reps + 1), args.prompt_len, args.seed)
    batches = [prompts[i * n : (i + 1) * n] for i in range(args.reps + 1)]
    for name, system in systems.items():
        system.generate(batches[0], WARMUP_TOKENS)
        print(f"warmed up {name}", flush=True)
    timings = Timings.for_systems(SYSTEMS)
    names = list(systems)
    for rep, batch in enumerate(batches[1:]):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            run = systems[name].generate(batch, args.max_tokens)
            timings.runs[name].append(run)
            print(f"rep {rep} {name:9s} wall {run.wall_s:7.2f} s  {run.tokens_per_s():6.2f} tok/s")
    check_lengths(timings, args)
    return timings, batches[1]


def check_lengths(timings: Timings, args: Args) -> None:
    for name, runs in timings.runs.items():
        for run in runs:
            lengths = {len(t) for t in run.token_ids}
            if len(run.token_ids) != args.num_requests or lengths != {args.max_tokens}:
                raise RuntimeError(f"{name}: unexpected output lengths {sorted(lengths)}")


# ---------------------------------------------------------------------------- spot check
def spot_check(system: SamebitsSystem, prompts: list[list[int]], run: BatchRun, k: int) -> list:
    """Re-run the first k prompts alone on a fresh engine over the same deployment (cold KV
    cache, prefix caching off). Returns (index, ids_equal, digests_equal) per prompt."""
    from samebits import LLM, SamplingParams
    from samebits.engine.engine import LLMEngine

    blocks = -(-(len(prompts[0]) + len(run.token_ids[0])) // 16) + 1
    engine = LLMEngine.from_deployment(
        system.llm.engine.deployment, max_num_seqs=1, num_kv_blocks=blocks,
        enable_prefix_caching=False,
    )  # fmt: skip
    alone = LLM(engine=engine)
    params = SamplingParams(max_tokens=len(run.token_ids[0]), temperature=0.0, ignore_eos=True)
    results = []
    for i in range(k):
        out = alone.generate([prompts[i]], params)[0].outputs[0]
        same_ids = list(out.token_ids) == run.token_ids[i]
        same_digests = list(out.logits_digests) == run.digests[i]
        results.append((i, same_ids, same_digests))
        print(f"spot check prompt {i}: token ids equal={same_ids}, digests equal={same_digests}")
    return results


# ---------------------------------------------------------------------------- profile
def profile_main(args: Args) -> None:
    """Where a plan's time goes with all requests batched: per-step op breakdown."""
    system = SamebitsSystem(args.profile, args)
    n = args.num_requests
    prompts = common.random_prompts(2 * n, args.prompt_len, args.seed)
    system.generate(prompts[:n], WARMUP_TOKENS)
    print(f"profile: plan={args.profile}, {n} requests, threads={args.threads}")
    print(f"load before: {common.loadavg()}")
    result = common.profile_decode(system.llm, prompts[n:], args.max_tokens)
    for kind, (rows, steps) in result.items():
        print(f"\n{kind} steps: {steps}; mean ms per step:")
        for label, ms in rows:
            print(f"  {ms:9.2f}  {label}")
    print(f"load after: {common.loadavg()}")


# ---------------------------------------------------------------------------- report
def report_body(args: Args, timings: Timings, spots: list, load: tuple[str, str], date: str):
    ratio = timings.median_tps("invariant") / timings.median_tps("hf")
    verdict = "meets" if ratio >= TARGET else "MISSES"
    total = args.num_requests * args.max_tokens
    lines = [
        f"- date: {date}",
        *common.machine_lines(),
        f"- command: `{common.command_line()}`",
        f"- workload: SmolLM2-135M-Instruct (embedded Q4_1 GGUF; HF and the fast plan run its "
        "float32 dequantization, the invariant plan reads the Q4_1 / Q8_0 blocks and expands "
        "them in-kernel to the same float32 values), "
        f"{args.num_requests} concurrent requests, each {args.prompt_len} distinct random "
        f"prompt tokens + exactly {args.max_tokens} greedy output tokens; samebits: one "
        f"`LLM.generate` call, max_num_seqs={max(16, args.num_requests)}, "
        f"max_num_batched_tokens={args.max_num_batched_tokens}; HF: one left-padded batch "
        f"with attention mask, EOS disabled; tokens/s = {total} / wall; {args.reps} "
        f"repetition(s) per system, interleaved in one process after a warm-up each",
        f"- threads: {args.threads} (HF and the fast plan: torch intra-op threads; invariant "
        "plan: native-kernel threads, torch on 1 intra-op thread)",
        f"- load average (1/5/15 min) before: {load[0]}; after: {load[1]} "
        "(machine shared with other engineers' runs)",
        "",
        "| system | wall s per rep | tok/s per rep | median tok/s | best tok/s |",
        "|---|---|---|---|---|",
    ]
    for name in SYSTEMS:
        runs = timings.runs[name]
        walls = ", ".join(f"{r.wall_s:.1f}" for r in runs)
        tps = ", ".join(f"{r.tokens_per_s():.2f}" for r in runs)
        med, best = timings.median_tps(name), timings.best_tps(name)
        lines.append(f"| {name} | {walls} | {tps} | {med:.2f} | {best:.2f} |")
    lines += ["", *agreement_lines(timings), *spot_lines(spots)]
    lines.append(
        f"- invariant / HF median tokens/s = {ratio:.2f}x (target >= {TARGET:.1f}x: {verdict}); "
        f"best rep vs best rep = {timings.best_tps('invariant') / timings.best_tps('hf'):.2f}x; "
        f"fast / HF median = {timings.median_tps('fast') / timings.median_tps('hf'):.2f}x"
    )
    return "\n".join(lines)


def agreement_lines(timings: Timings) -> list[str]:
    lines = []
    for a, b in (("invariant", "hf"), ("invariant", "fast")):
        x, y = timings.runs[a][0], timings.runs[b][0]
        counts = [
            common.leading_matches(p, q) for p, q in zip(x.token_ids, y.token_ids, strict=True)
        ]
        full = sum(c == len(p) for c, p in zip(counts, x.token_ids, strict=True))
        lines.append(
            f"- {a} vs {b} (rep 0): leading greedy tokens equal per request = {counts} "
            f"({full}/{len(counts)} identical)"
        )
    return lines


def spot_lines(spots: list) -> list[str]:
    if not spots:
        return ["- spot check: not run"]
    ok = all(ids and dig for _, ids, dig in spots)
    detail = "; ".join(f"prompt {i}: ids {ids}, digests {dig}" for i, ids, dig in spots)
    status = "PASS" if ok else "FAIL"
    return [f"- batch == alone spot check (invariant, cold fresh engine): {status} ({detail})"]


def parse_args(argv: list[str] | None = None) -> Args:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--num-requests", type=int, default=16)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--max-num-batched-tokens", type=int, default=512)
    p.add_argument("--reps", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--spot-check", type=int, default=2, help="prompts re-run alone (0: skip)")
    p.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    p.add_argument(
        "--profile", choices=SYSTEMS[:2], default=None, help="only profile one plan's steps"
    )
    a = p.parse_args(argv)
    for name in ("threads", "num_requests", "prompt_len", "max_tokens", "reps"):
        if getattr(a, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    if not 0 <= a.spot_check <= a.num_requests:
        raise SystemExit(f"--spot-check must be in [0, {a.num_requests}], got {a.spot_check}")
    return Args(
        a.threads, a.num_requests, a.prompt_len, a.max_tokens, a.max_num_batched_tokens,
        a.reps, a.seed, a.spot_check, not a.no_write, a.profile,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.profile:
        return profile_main(args)
    date, load_before = common.utc_now(), common.loadavg()
    systems = {name: make_system(name, args) for name in SYSTEMS}
    timings, first_batch = time_systems(args, systems)
    load_after = common.loadavg()
    spots = []
    if args.spot_check:
        spots = spot_check(
            systems["invariant"], first_batch, timings.runs["invariant"][0], args.spot_check
        )
    body = report_body(args, timings, spots, (load_before, load_after), date)
    print("\n" + body)
    if args.write:
        common.write_section(SECTION, body)
    if spots and not all(ids and dig for _, ids, dig in spots):
        raise SystemExit("spot check FAILED: batched output differs from the request alone")


if __name__ == "__main__":
    main()
