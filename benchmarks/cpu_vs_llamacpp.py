"""CPU benchmark (issue 12): samebits (invariant plan) against llama.cpp on the same GGUF.

SmolLM2-135M-Instruct (the embedded Q4_1 GGUF; samebits reads its Q4_1 / Q8_0 blocks and
expands them in-kernel to the loader's float32 values, llama.cpp runs its own quantized dot
products), the same thread count for both, side by side in this one process, interleaved
(the order rotates every repetition, so a change in machine load hits both alike):

- batch 1: one `--prompt-len` random-token prompt, exactly `--max-tokens` greedy tokens
  (EOS ignored), prefix caching off; prefill = time to the first token, decode tok/s =
  (tokens - 1) / (wall - prefill);
- concurrent: `--concurrent` distinct prompts at once, each `--max-tokens` greedy tokens;
  tokens/s = all tokens / wall. samebits: one `LLM.generate` call (max_num_seqs = the
  requests, 512-token budget); llama.cpp: one context with that many sequences, all prompts
  and then one token per sequence per step through its batch API (llama_runner.py), with
  both KV layouts (per-sequence and unified); the best is the reference.

llama.cpp comes from llama-cpp-python, built from source (not a test dependency):

    CMAKE_ARGS="-DGGML_NATIVE=ON" nice -n 19 pip install --no-binary llama-cpp-python \\
        llama-cpp-python==0.3.36
    PYTHONPATH=src python benchmarks/cpu_vs_llamacpp.py            # writes RESULTS.md
    PYTHONPATH=src python benchmarks/cpu_vs_llamacpp.py --profile  # samebits step breakdown
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from llamacpp_runner import Generation, LlamaCpp  # noqa: E402

SECTION = "CPU vs llama.cpp (issue 12)"
TARGETS = {"decode": 1.0, "concurrent": 2.0}  # samebits over llama.cpp
CONCURRENT_LAYOUTS = (False, True)  # llama.cpp kv_unified


@dataclass(frozen=True)
class Args:
    threads: int
    prompt_len: int
    max_tokens: int
    concurrent: int
    reps: int
    seed: int
    write: bool
    profile: bool


class Samebits:
    """samebits `LLM`, invariant plan, prefix caching off."""

    def __init__(self, args: Args):
        from samebits import LLM

        self.llm = LLM(
            num_threads=args.threads, enable_prefix_caching=False,
            max_num_seqs=max(16, args.concurrent), max_num_batched_tokens=512,
        )  # fmt: skip
        self.describe = f"samebits invariant plan, num_threads={args.threads}, no prefix caching"

    def generate(self, prompts: list[list[int]], max_tokens: int) -> Generation:
        import time

        from samebits import SamplingParams
        from samebits.outputs import RequestOutputKind

        params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
        tokens: dict[str, list[int]] = {}  # by request id (assigned in prompt order)
        ttft = None
        start = time.perf_counter()
        stream = self.llm.generate_stream(prompts, params, output_kind=RequestOutputKind.DELTA)
        for out in stream:
            tokens.setdefault(out.request_id, []).extend(out.outputs[0].token_ids)
            if ttft is None and len(tokens) == len(prompts) and all(tokens.values()):
                ttft = time.perf_counter() - start
        wall = time.perf_counter() - start
        ordered = [tokens[rid] for rid in sorted(tokens, key=int)]
        return Generation(wall, ttft or 0.0, ordered)


@dataclass
class Runs:
    """Timed generations per system label."""

    runs: dict[str, list[Generation]] = field(default_factory=dict)

    def add(self, label: str, gen: Generation) -> None:
        self.runs.setdefault(label, []).append(gen)

    def median(self, label: str, metric) -> float:
        return statistics.median(metric(g) for g in self.runs[label])


def total_tps(g: Generation) -> float:
    return sum(len(t) for t in g.token_ids) / g.wall_s


def decode_tps(g: Generation) -> float:
    return sum(len(t) - 1 for t in g.token_ids) / (g.wall_s - g.ttft_s)


def run_all(args: Args, loads: list[str]) -> tuple[Runs, Runs, dict[str, str]]:
    """Warm up, then `reps` rounds of batch 1 and concurrent, systems interleaved."""
    from samebits.model import default_model_path

    path = default_model_path()
    ctx1 = 2 * (args.prompt_len + args.max_tokens)
    ctxn = args.concurrent * (-(-(args.prompt_len + args.max_tokens) // 256) * 256)
    systems = {
        "samebits": (Samebits(args),) * 2,
        "llama.cpp": (LlamaCpp(path, args.threads, 1, max(512, ctx1), False),),
    }
    for unified in CONCURRENT_LAYOUTS:
        label = f"llama.cpp kv_unified={unified}"
        systems[label] = (LlamaCpp(path, args.threads, args.concurrent, ctxn, unified),)
    described = {label: s[0].describe for label, s in systems.items()}
    single, many = Runs(), Runs()
    prompts = common.random_prompts(
        1 + args.reps * (1 + args.concurrent), args.prompt_len, args.seed
    )
    warm, prompts = prompts[0], prompts[1:]
    for label, s in systems.items():
        s[0].generate([warm] * (1 if "=" not in label else 2), 4)
        print(f"warmed up {label}", flush=True)
    batch1 = ["samebits", "llama.cpp"]
    conc = ["samebits"] + [f"llama.cpp kv_unified={u}" for u in CONCURRENT_LAYOUTS]
    for rep in range(args.reps):
        one, group = prompts[0], prompts[1 : 1 + args.concurrent]
        prompts = prompts[1 + args.concurrent :]
        for label in batch1[rep % 2 :] + batch1[: rep % 2]:
            loads.append(common.loadavg())
            g = systems[label][0].generate([one], args.max_tokens)
            single.add(label, g)
            print(f"rep {rep} batch-1 {label:28s} prefill {g.ttft_s:.3f} s decode "
                  f"{decode_tps(g):7.2f} tok/s  load {loads[-1]}", flush=True)  # fmt: skip
        for label in conc[rep % 3 :] + conc[: rep % 3]:
            loads.append(common.loadavg())
            g = systems[label][0].generate(group, args.max_tokens)
            many.add(label, g)
            print(f"rep {rep} x{args.concurrent} {label:28s} wall {g.wall_s:.2f} s "
                  f"{total_tps(g):7.2f} tok/s  load {loads[-1]}", flush=True)  # fmt: skip
    return single, many, described


def leading(a: list[int], b: list[int]) -> int:
    return common.leading_matches(a, b)


def report_body(args: Args, single: Runs, many: Runs, described, loads, date) -> str:
    s, ll = "samebits", "llama.cpp"
    best_ll = max(
        (f"{ll} kv_unified={u}" for u in CONCURRENT_LAYOUTS),
        key=lambda k: many.median(k, total_tps),
    )
    dec = single.median(s, decode_tps) / single.median(ll, decode_tps)
    pre = single.median(ll, lambda g: g.ttft_s) / single.median(s, lambda g: g.ttft_s)
    conc = many.median(s, total_tps) / many.median(best_ll, total_tps)
    agree = [
        leading(a.token_ids[0], b.token_ids[0])
        for a, b in zip(single.runs[s], single.runs[ll], strict=True)
    ]
    lines = [
        f"- date: {date}",
        *common.machine_lines(),
        f"- command: `{common.command_line()}`",
        f"- workload: SmolLM2-135M-Instruct, the embedded Q4_1 GGUF (Q8_0 tied embedding) for "
        f"both; batch 1: {args.prompt_len} random prompt tokens, exactly {args.max_tokens} "
        f"greedy tokens, prefix caching off; concurrent: {args.concurrent} distinct "
        f"{args.prompt_len}-token prompts, {args.max_tokens} greedy tokens each; "
        f"{args.reps} repetitions, systems interleaved in one process after a warm-up",
        *[f"- {label}: {text}" for label, text in described.items()],
        f"- load average (1/5/15 min) at each timed run: {'; '.join(loads)} (machine shared "
        "with other engineers' jobs)",
        "",
        "| system | prefill s per rep | median prefill s | decode tok/s per rep | median decode tok/s |",
        "|---|---|---|---|---|",
    ]
    for label in (s, ll):
        runs = single.runs[label]
        lines.append(
            f"| {label} | {', '.join(f'{g.ttft_s:.3f}' for g in runs)} | "
            f"{single.median(label, lambda g: g.ttft_s):.3f} | "
            f"{', '.join(f'{decode_tps(g):.1f}' for g in runs)} | {single.median(label, decode_tps):.1f} |"
        )
    lines += [
        "",
        f"| {args.concurrent} concurrent | wall s per rep | tok/s per rep | median tok/s |",
        "|---|---|---|---|",
    ]
    for label in many.runs:
        runs = many.runs[label]
        lines.append(
            f"| {label} | {', '.join(f'{g.wall_s:.2f}' for g in runs)} | "
            f"{', '.join(f'{total_tps(g):.1f}' for g in runs)} | {many.median(label, total_tps):.1f} |"
        )
    verdict = lambda r, t: "meets" if r >= t else "MISSES"  # noqa: E731
    lines += [
        "",
        f"- batch-1 decode: samebits / llama.cpp = {dec:.2f}x (target >= 1.0x: {verdict(dec, 1.0)})",
        f"- prefill: llama.cpp time / samebits time = {pre:.2f}x (samebits {'ahead' if pre > 1 else 'BEHIND'})",
        f"- {args.concurrent} concurrent: samebits / best llama.cpp ({best_ll}) = {conc:.2f}x "
        f"(target >= 2.0x: {verdict(conc, 2.0)})",
        f"- greedy tokens equal to llama.cpp's from the start, per batch-1 rep: {agree} of "
        f"{args.max_tokens} (llama.cpp quantizes activations to 8 bits for its dot products; "
        "samebits computes in float32, bitwise equal to the float32 dequantized model)",
    ]
    return "\n".join(lines)


def profile_main(args: Args) -> None:
    import step_profile

    from samebits import LLM, SamplingParams

    for fused in (True, False):
        for n in (1, args.concurrent):
            llm = LLM(
                num_threads=args.threads, enable_prefix_caching=False,
                max_num_seqs=max(16, n), max_num_batched_tokens=512,
            )  # fmt: skip
            warm = common.random_prompts(n, args.prompt_len, args.seed + 1000)
            llm.generate(warm, SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True))
            before = common.loadavg()
            prompts = common.random_prompts(n, args.prompt_len, args.seed)
            rows, steps = step_profile.profile_decode(llm, prompts, args.max_tokens, fused)
            path = "fused layers (as run)" if fused else "op by op (per kernel)"
            print(f"\nbatch {n}, {path}: {steps} decode steps, mean ms per step (load {before} "
                  f"-> {common.loadavg()})")  # fmt: skip
            for label, ms in rows:
                print(f"| {label} | {ms:.2f} |")


def parse_args(argv: list[str] | None = None) -> Args:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--prompt-len", type=int, default=104)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--concurrent", type=int, default=16)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-write", action="store_true", help="do not update RESULTS.md")
    p.add_argument("--profile", action="store_true", help="samebits decode-step breakdown only")
    a = p.parse_args(argv)
    return Args(
        a.threads, a.prompt_len, a.max_tokens, a.concurrent, a.reps, a.seed, not a.no_write,
        a.profile,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.profile:
        return profile_main(args)
    date, loads = common.utc_now(), []
    single, many, described = run_all(args, loads)
    body = report_body(args, single, many, described, loads, date)
    print("\n" + body)
    if args.write:
        common.write_section(SECTION, body)


if __name__ == "__main__":
    main()
