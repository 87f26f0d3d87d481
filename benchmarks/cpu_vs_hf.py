"""Batch-1 CPU benchmark: samebits (invariant plan, fast plan) against HF transformers.

SmolLM2-135M (the embedded GGUF, float32), greedy, `--prompt-len` random prompt tokens and
exactly `--max-tokens` output tokens, batch 1, the same thread count for all three systems.
All three are timed in this one process, interleaved round-robin (so a change in machine
load hits every system alike); each is warmed up first. Each repetition uses a fresh prompt
(the same prompts for every system), so the engine's prefix cache never hits.
Peak RSS is measured per system in a child process (`--only NAME`), so the numbers don't mix.

    PYTHONPATH=src python benchmarks/cpu_vs_hf.py            # full run, writes RESULTS.md
    PYTHONPATH=src python benchmarks/cpu_vs_hf.py --only hf  # one system (used for RSS)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from common import Timings  # noqa: E402

SYSTEMS = ("invariant", "fast", "hf")
SECTION = "CPU, batch 1 (issue 2)"
TARGET = 1.0  # invariant tokens/s over HF tokens/s


@dataclass(frozen=True)
class Args:
    threads: int
    prompt_len: int
    max_tokens: int
    reps: int
    seed: int
    only: str | None
    rss: bool
    write: bool
    profile: str | None


@dataclass(frozen=True)
class Run:
    """One timed generation: end-to-end wall time, time to first token, the tokens."""

    wall_s: float
    ttft_s: float
    token_ids: list[int]

    def tokens_per_s(self) -> float:
        return len(self.token_ids) / self.wall_s

    def decode_tokens_per_s(self) -> float:
        return (len(self.token_ids) - 1) / (self.wall_s - self.ttft_s)


# ---------------------------------------------------------------------------- systems
class SamebitsSystem:
    """samebits `LLM` with one kernel plan; times its first token through generate_stream."""

    def __init__(self, plan: str, threads: int):
        from samebits import LLM

        self.llm = LLM(kernel_plan=plan, num_threads=threads)

    def generate(self, prompt: list[int], max_tokens: int) -> Run:
        from samebits import SamplingParams

        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        start = time.perf_counter()
        ttft = float("nan")
        last = None
        for out in self.llm.generate_stream([prompt], params):
            if ttft != ttft and out.outputs[0].token_ids:
                ttft = time.perf_counter() - start
            last = out
        wall = time.perf_counter() - start
        return Run(wall, ttft, list(last.outputs[0].token_ids))


class HFSystem:
    """transformers `generate` on the same GGUF weights (float32)."""

    def __init__(self, threads: int):
        self.model = common.load_hf_model(threads)
        self.threads = threads

    def generate(self, prompt: list[int], max_tokens: int) -> Run:
        run = lambda: common.hf_generate(self.model, [prompt], max_tokens, self.threads)  # noqa: E731
        wall, result = common.timed(run)
        return Run(wall, result.ttft_s, result.token_ids[0])


def make_system(name: str, threads: int):
    return HFSystem(threads) if name == "hf" else SamebitsSystem(name, threads)


# ---------------------------------------------------------------------------- timing
def time_systems(args: Args, systems: dict, prompts: list[list[int]]) -> Timings:
    """Warm each system up on prompts[0], then time prompts[1:] round-robin, rotating which
    system goes first in each repetition."""
    for name, system in systems.items():
        system.generate(prompts[0], 8)
        print(f"warmed up {name}", flush=True)
    timings = Timings.for_systems(SYSTEMS)
    names = list(systems)
    for rep, prompt in enumerate(prompts[1:]):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            run = systems[name].generate(prompt, args.max_tokens)
            timings.runs[name].append(run)
            print(
                f"rep {rep} {name:9s} wall {run.wall_s:7.2f} s  {run.tokens_per_s():6.2f} tok/s  "
                f"ttft {run.ttft_s:6.2f} s",
                flush=True,
            )
    return timings


def check_lengths(timings: Timings, max_tokens: int) -> None:
    for name, runs in timings.runs.items():
        for run in runs:
            if len(run.token_ids) != max_tokens:
                raise RuntimeError(f"{name} produced {len(run.token_ids)} tokens, not {max_tokens}")


def agreement(timings: Timings) -> list[str]:
    """Matching leading greedy tokens per repetition, for each pair of systems."""
    pairs = [("invariant", "hf"), ("fast", "hf"), ("invariant", "fast")]
    lines = []
    for a, b in pairs:
        counts = [
            common.leading_matches(x.token_ids, y.token_ids)
            for x, y in zip(timings.runs[a], timings.runs[b], strict=True)
        ]
        lines.append(f"{a} vs {b}: leading tokens equal per rep = {counts}")
    return lines


# ---------------------------------------------------------------------------- memory
def only_main(args: Args) -> None:
    """Child mode: load one system, warm up, run one generation, print a JSON line."""
    system = make_system(args.only, args.threads)
    rss_loaded = common.current_rss_mib()
    prompts = common.random_prompts(2, args.prompt_len, args.seed)
    system.generate(prompts[0], 8)
    run = system.generate(prompts[1], args.max_tokens)
    report = {
        "system": args.only,
        "rss_after_load_mib": rss_loaded,
        "rss_end_mib": common.current_rss_mib(),
        "peak_rss_mib": common.peak_rss_mib(),
        "tokens_per_s": run.tokens_per_s(),
    }
    print("RESULT " + json.dumps(report), flush=True)


def measure_rss(args: Args) -> dict[str, dict]:
    """Run each system alone in a child process (one after another) and collect its report."""
    reports = {}
    for name in SYSTEMS:
        cmd = [sys.executable, __file__, "--only", name, "--threads", str(args.threads)]
        cmd += ["--prompt-len", str(args.prompt_len), "--max-tokens", str(args.max_tokens)]
        cmd += ["--seed", str(args.seed)]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        lines = [ln for ln in done.stdout.splitlines() if ln.startswith("RESULT ")]
        if done.returncode != 0 or not lines:
            raise RuntimeError(f"RSS child for {name} failed:\n{done.stderr[-2000:]}")
        reports[name] = json.loads(lines[-1][len("RESULT ") :])
        print(f"rss {name}: {reports[name]}", flush=True)
    return reports


# ---------------------------------------------------------------------------- profile
def profile_main(args: Args) -> None:
    """Where a plan's time goes at batch 1: per-step op breakdown of prefill and decode."""
    system = SamebitsSystem(args.profile, args.threads)
    prompts = common.random_prompts(2, args.prompt_len, args.seed)
    system.generate(prompts[0], 8)
    print(f"profile: plan={args.profile}, threads={args.threads}, load {common.loadavg()}")
    print("\n".join(common.linear_tile_costs(system.llm)))
    result = common.profile_decode(system.llm, prompts[1:], args.max_tokens)
    print_profile(result)
    print(f"load after: {common.loadavg()}")


def print_profile(result: dict[str, tuple]) -> None:
    for kind, (rows, steps) in result.items():
        print(f"\n{kind} steps: {steps}; mean ms per step:")
        for label, ms in rows:
            print(f"  {ms:9.2f}  {label}")


# ---------------------------------------------------------------------------- report
def report_body(args: Args, timings: Timings, rss: dict, load: tuple[str, str], date: str) -> str:
    ratio = timings.median_tps("invariant") / timings.median_tps("hf")
    lines = [
        f"- date: {date}",
        *common.machine_lines(),
        f"- command: `{common.command_line()}`",
        f"- workload: SmolLM2-135M-Instruct (embedded Q4_1 GGUF; HF and the fast plan run its "
        "float32 dequantization, the invariant plan reads the Q4_1 / Q8_0 blocks and expands "
        "them in-kernel to the same float32 values), "
        f"greedy, {args.prompt_len} random prompt tokens, exactly {args.max_tokens} output "
        f"tokens (engine: ignore_eos; HF: EOS disabled), batch 1, {args.reps} repetitions "
        f"each, interleaved round-robin in one process after one warm-up generation each",
        f"- threads: {args.threads} (HF and the fast plan: torch intra-op threads; invariant "
        "plan: native-kernel threads, torch on 1 intra-op thread)",
        f"- load average (1/5/15 min) before: {load[0]}; after: {load[1]} "
        "(machine shared with other engineers' runs)",
        "",
        "| system | tok/s per rep (end to end) | median tok/s | best tok/s | TTFT per rep (s) | "
        "decode tok/s (median) | peak RSS (MiB) |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += [table_row(name, timings.runs[name], rss.get(name)) for name in SYSTEMS]
    lines += ["", *[f"- {line}" for line in agreement(timings)]]
    verdict = "meets" if ratio >= TARGET else "MISSES"
    best = timings.best_tps("invariant") / timings.best_tps("hf")
    lines += [
        f"- invariant / HF median tokens/s = {ratio:.2f}x (target >= {TARGET:.1f}x: {verdict}); "
        f"best rep vs best rep = {best:.2f}x; "
        f"fast / HF median = {timings.median_tps('fast') / timings.median_tps('hf'):.2f}x",
    ]
    return "\n".join(lines)


def table_row(name: str, runs: list[Run], rss: dict | None) -> str:
    tps = ", ".join(f"{r.tokens_per_s():.2f}" for r in runs)
    ttft = ", ".join(f"{r.ttft_s:.2f}" for r in runs)
    decode = common.median([r.decode_tokens_per_s() for r in runs])
    peak = f"{rss['peak_rss_mib']:.0f}" if rss else "not measured"
    med = common.median([r.tokens_per_s() for r in runs])
    best = max(r.tokens_per_s() for r in runs)
    return f"| {name} | {tps} | {med:.2f} | {best:.2f} | {ttft} | {decode:.2f} | {peak} |"


def parse_args(argv: list[str] | None = None) -> Args:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", choices=SYSTEMS, default=None, help="child mode: one system")
    p.add_argument("--no-rss", action="store_true", help="skip the per-system RSS children")
    p.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    p.add_argument(
        "--profile", choices=SYSTEMS[:2], default=None, help="only profile one plan's steps"
    )
    a = p.parse_args(argv)
    for name in ("threads", "prompt_len", "max_tokens", "reps"):
        if getattr(a, name) < 1:
            raise SystemExit(f"--{name.replace('_', '-')} must be >= 1, got {getattr(a, name)}")
    return Args(
        a.threads, a.prompt_len, a.max_tokens, a.reps, a.seed, a.only, not a.no_rss,
        not a.no_write, a.profile,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.only:
        return only_main(args)
    if args.profile:
        return profile_main(args)
    date, load_before = common.utc_now(), common.loadavg()
    systems = {name: make_system(name, args.threads) for name in SYSTEMS}
    prompts = common.random_prompts(args.reps + 1, args.prompt_len, args.seed)
    timings = time_systems(args, systems, prompts)
    check_lengths(timings, args.max_tokens)
    del systems
    load_after = common.loadavg()
    rss = measure_rss(args) if args.rss else {}
    body = report_body(args, timings, rss, (load_before, load_after), date)
    print("\n" + body)
    if args.write:
        common.write_section(SECTION, body)


if __name__ == "__main__":
    main()
