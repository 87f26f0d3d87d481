"""Shared helpers for the CPU benchmarks: machine facts, prompts, the HF baseline, memory
readings and the RESULTS.md section writer.

Invariant: nothing here changes engine behaviour; the helpers only time, measure and report.
"""

from __future__ import annotations

import datetime
import os
import platform
import random
import re
import resource
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
RESULTS_PATH = REPO_ROOT / "benchmarks" / "RESULTS.md"
RESULTS_HEADER = (
    "# samebits benchmark results\n\n"
    "Measurements (evidence class: measurement). Each section names its machine, date, "
    "command, thread count and the load on the machine while it ran.\n"
)
# Random prompt ids are drawn from this range: ordinary vocabulary, clear of the special
# tokens SmolLM2 keeps at the low ids.
PROMPT_TOKEN_RANGE = (100, 49000)


# ---------------------------------------------------------------------------- machine facts


@dataclass
class Timings:
    """Timed runs per system; each run has `tokens_per_s()`."""

    runs: dict[str, list]

    @classmethod
    def for_systems(cls, systems: tuple[str, ...]) -> Timings:
        return cls({s: [] for s in systems})

    def median_tps(self, system: str) -> float:
        return median([r.tokens_per_s() for r in self.runs[system]])

    def best_tps(self, system: str) -> float:
        """Fastest repetition: the least disturbed by other jobs on a shared machine."""
        return max(r.tokens_per_s() for r in self.runs[system])


def cpu_model() -> str:
    """The CPU model name from /proc/cpuinfo (platform.processor() as a fallback)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else "unknown"


def total_ram_gib() -> float:
    """MemTotal from /proc/meminfo, in GiB (0.0 when unreadable)."""
    try:
        text = Path("/proc/meminfo").read_text()
    except OSError:
        return 0.0
    match = re.search(r"^MemTotal:\s*(\d+)\s*kB", text, re.MULTILINE)
    return int(match.group(1)) / 2**20 if match else 0.0


def loadavg() -> str:
    """The first three fields of /proc/loadavg (1, 5, 15 minute load)."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def utc_now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def git_state() -> str:
    """Commit and the number of locally modified tracked files (the tree is shared)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)
        return done.stdout.rstrip()

    head = git("rev-parse", "--short", "HEAD").strip() or "unknown"
    dirty = [line for line in git("status", "--porcelain").splitlines() if line[:2] != "??"]
    modified = ", ".join(line[3:] for line in dirty)
    return f"{head}" + (f" + uncommitted changes in {modified}" if modified else "")


def library_versions() -> str:
    import numba
    import torch
    import transformers

    return (
        f"python {platform.python_version()}, torch {torch.__version__}, "
        f"transformers {transformers.__version__}, numba {numba.__version__}"
    )


def machine_lines() -> list[str]:
    """Markdown bullet lines describing the machine and software."""
    return [
        f"- machine: {cpu_model()}, {os.cpu_count()} cores, {total_ram_gib():.1f} GiB RAM",
        f"- software: {library_versions()}",
        f"- code: {git_state()}",
    ]


def command_line() -> str:
    """The command that ran this script, as typed from the repository root."""
    script = os.path.relpath(sys.argv[0], REPO_ROOT)
    return " ".join(["PYTHONPATH=src", "python", script, *sys.argv[1:]])


# ---------------------------------------------------------------------------- workload
def random_prompts(count: int, length: int, seed: int) -> list[list[int]]:
    """`count` distinct prompts of `length` uniformly random token ids (deterministic)."""
    rng = random.Random(seed)
    lo, hi = PROMPT_TOKEN_RANGE
    prompts = [[rng.randrange(lo, hi) for _ in range(length)] for _ in range(count)]
    if len({tuple(p) for p in prompts}) != count:
        raise ValueError("random_prompts drew duplicate prompts; use another seed")
    return prompts


def leading_matches(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common leading run of two token sequences."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    """(wall seconds, result) of one call."""
    start = time.perf_counter()
    result = fn()
    return time.perf_counter() - start, result


# ---------------------------------------------------------------------------- memory
def peak_rss_mib() -> float:
    """Peak resident set of this process so far (VmHWM, else ru_maxrss), in MiB."""
    try:
        text = Path("/proc/self/status").read_text()
        match = re.search(r"^VmHWM:\s*(\d+)\s*kB", text, re.MULTILINE)
        if match:
            return int(match.group(1)) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    """Current resident set of this process (VmRSS), in MiB (0.0 when unreadable)."""
    try:
        text = Path("/proc/self/status").read_text()
    except OSError:
        return 0.0
    match = re.search(r"^VmRSS:\s*(\d+)\s*kB", text, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else 0.0


# ---------------------------------------------------------------------------- HF baseline
@dataclass(frozen=True)
class HFResult:
    """Generated ids per prompt (exactly max_new_tokens each) and time to first token."""

    token_ids: list[list[int]]
    ttft_s: float


def load_hf_model(threads: int):
    """SmolLM2 from the same GGUF the engine loads, dequantized to float32 by transformers.

    EOS is switched off in its generation config so that `generate` runs exactly
    max_new_tokens greedy steps, like the engine's ignore_eos (min_new_tokens would instead
    mask EOS out of the argmax)."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    from samebits.model import default_model_path

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    torch.set_num_threads(threads)
    path = default_model_path()
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32
    )
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


class _FirstTokenClock:
    """A transformers streamer that records when the first generated token arrives
    (its first `put` is the prompt, the second the first new token)."""

    def __init__(self, start: float):
        self.start = start
        self.puts = 0
        self.first_token_s = float("nan")

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first_token_s = time.perf_counter() - self.start

    def end(self) -> None:
        pass


def hf_generate(model, prompts: list[list[int]], max_new_tokens: int, threads: int) -> HFResult:
    """Greedy batch generation, left-padded with an attention mask; returns new ids only.
    torch gets `threads` intra-op threads (a samebits plan in the same process may have set
    another count: the invariant plan runs torch on one thread)."""
    import torch

    torch.set_num_threads(threads)

    width = max(len(p) for p in prompts)
    ids = torch.zeros((len(prompts), width), dtype=torch.int64)
    mask = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p) :] = torch.tensor(p)
        mask[i, width - len(p) :] = 1
    clock = _FirstTokenClock(time.perf_counter())
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
            streamer=clock if len(prompts) == 1 else None,
        )  # fmt: skip
    new = out[:, width:]
    if new.shape[1] != max_new_tokens:
        raise RuntimeError(f"HF generated {new.shape[1]} tokens, expected {max_new_tokens}")
    return HFResult([row.tolist() for row in new], clock.first_token_s)


# ---------------------------------------------------------------------------- RESULTS.md
def write_section(title: str, body: str, path: Path = RESULTS_PATH) -> None:
    """Replace the `## title` section of RESULTS.md with `body` (append if absent).

    A hand-written `### Analysis` subsection at the end of the old section is kept (it carries
    its own date); other sections are kept as they are. A new file gets a short header."""
    text = path.read_text() if path.exists() else RESULTS_HEADER
    heading = f"## {title}\n"
    start = text.find(heading)
    if start < 0:
        path.write_text(text.rstrip("\n") + "\n\n" + heading + "\n" + body.strip() + "\n")
        return
    nxt = text.find("\n## ", start + len(heading))
    end = len(text) if nxt < 0 else nxt + 1
    old = text[start:end]
    kept = old[old.find(ANALYSIS) :].rstrip("\n") + "\n" if ANALYSIS in old else ""
    section = heading + "\n" + body.strip() + "\n" + ("\n" + kept if kept else "")
    path.write_text(text[:start] + section + ("\n" + text[end:] if nxt >= 0 else ""))


ANALYSIS = "### Analysis"


# ---------------------------------------------------------------------------- profiling
class OpClock:
    """Accumulates wall time per label for wrapped callables (callers on any thread)."""

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self._lock = threading.Lock()

    def wrap(self, label: str, fn: Callable) -> Callable:
        def timed_call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent = time.perf_counter() - start
                with self._lock:
                    self.totals[label] = self.totals.get(label, 0.0) + spent

        return timed_call

    def reset(self) -> None:
        with self._lock:
            self.totals.clear()


OP_NAMES = ("rms_norm", "add_rms_norm", "head_rms_norm", "rope", "silu_mul", "attention")


def instrument_engine(llm, clock: OpClock) -> None:
    """Wrap the engine's model ops, linears, forward, runner and step with `clock`.

    Changes this process's engine object only (for profiling runs, never for timing runs)."""
    engine = llm.engine
    model = engine.runner.model
    for layer in model.layers:
        for name in ("qkv", "o", "gate_up", "down"):
            setattr(layer, name, clock.wrap(f"linear {name}", getattr(layer, name)))
    model.lm_head = clock.wrap("linear lm_head", model.lm_head)
    for name in OP_NAMES:
        setattr(model.ops, name, clock.wrap(name, getattr(model.ops, name)))
    model.forward = clock.wrap("model.forward", model.forward)
    engine.runner.execute = clock.wrap("runner.execute", engine.runner.execute)
    engine.step = clock.wrap("engine.step", engine.step)


def breakdown(totals: dict[str, float], steps: int) -> list[tuple[str, float]]:
    """Per-step milliseconds by category; the remainders name what the wrappers don't see."""
    ms = {k: v * 1e3 / steps for k, v in totals.items()}
    leaves = {k: v for k, v in ms.items() if k.startswith("linear ") or k in OP_NAMES}
    forward, execute, step = (
        ms.get(k, 0.0) for k in ("model.forward", "runner.execute", "engine.step")
    )
    rows = sorted(leaves.items(), key=lambda kv: -kv[1])
    rows.append(
        (
            "forward: other (embedding, reshapes, KV index_copy, python)",
            forward - sum(leaves.values()),
        )
    )
    rows.append(("runner: batch building, numpy", execute - forward))
    rows.append(("engine: scheduler, sampler, digests, detokenizer", step - execute))
    rows.append(("TOTAL per step", step))
    return rows


def profile_decode(llm, prompts: list[list[int]], max_tokens: int) -> dict[str, tuple]:
    """Run `prompts` to completion step by step with `llm` instrumented. Returns, for "decode"
    (steps where every request decodes one token) and "other" (steps with prompt tokens),
    (per-step breakdown, number of steps)."""
    from samebits import SamplingParams

    clock = OpClock()
    instrument_engine(llm, clock)
    engine = llm.engine
    last = record_schedule(engine.scheduler)
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    for i, prompt in enumerate(prompts):
        engine.add_request(f"profile-{i}", prompt, params)
    sums: dict[str, dict[str, float]] = {"decode": {}, "other": {}}
    steps = {"decode": 0, "other": 0}
    while engine.has_unfinished_requests():
        clock.reset()
        engine.step()
        scheduled = last[0].scheduled
        pure = len(scheduled) == len(prompts) and all(len(s.token_ids) == 1 for s in scheduled)
        kind = "decode" if pure else "other"
        steps[kind] += 1
        for k, v in clock.totals.items():
            sums[kind][k] = sums[kind].get(k, 0.0) + v
    return {k: (breakdown(sums[k], max(steps[k], 1)), steps[k]) for k in sums}


def record_schedule(scheduler) -> list:
    """Make `scheduler.schedule` keep its latest output in the returned one-item list."""
    last: list = [None]
    schedule = scheduler.schedule

    def recording_schedule():
        last[0] = schedule()
        return last[0]

    scheduler.schedule = recording_schedule
    return last


def linear_tile_costs(llm, reps: int = 50) -> list[str]:
    """Per weight shape: ms of one decode row through the plan's linear (padded to its row
    quantum) vs a bare torch.mm with M=1 (what HF's decode does)."""
    import torch

    model = llm.engine.runner.model
    lines = []
    for lin in model.linears():
        k = lin.weight.shape[1] if hasattr(lin, "weight") else None
        if k is None:
            continue
        x = torch.randn(1, k)
        wt = lin.weight.t()
        plan_ms = _mean_ms(lambda lin=lin, x=x: lin(x), reps)
        mm_ms = _mean_ms(lambda x=x, wt=wt: torch.mm(x, wt), reps)
        lines.append(
            f"linear {tuple(lin.weight.shape)}: plan {plan_ms:.3f} ms, torch.mm M=1 {mm_ms:.3f} ms"
        )
    return lines


def _mean_ms(fn: Callable[[], object], reps: int) -> float:
    fn()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - start) * 1e3 / reps


class ServerThread:
    """uvicorn serving `app` on a free loopback port in a daemon thread; `with` gives its URL
    once it listens and stops it on exit."""

    def __init__(self, app) -> None:
        import uvicorn

        from samebits.server.config import DEFAULT_TIMEOUT_KEEP_ALIVE_S

        config = uvicorn.Config(
            app, host="127.0.0.1", port=0, log_level="warning", backlog=4096,
            timeout_keep_alive=DEFAULT_TIMEOUT_KEEP_ALIVE_S,
        )  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server thread ended before it started")
            time.sleep(0.01)
        host, port = self.server.servers[0].sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join()


def add_kernel_knobs(parser) -> None:
    """Experiment flags for the GPU kernels' launch-only knobs (no value depends on them):
    `--attention-maxnreg N` caps the attention kernel's registers (how many programs fit on an
    SM), `--sha256-rows-per-program N` sets the rows of a device SHA-256 program."""
    parser.add_argument("--attention-maxnreg", type=int, default=None,
                        help="experiment: cap the attention kernel's registers (same bits)")  # fmt: skip
    parser.add_argument("--sha256-rows-per-program", type=int, default=None,
                        help="experiment: rows per device SHA-256 program (same digests)")  # fmt: skip


def apply_kernel_knobs(args) -> None:
    """Set the package knobs from `add_kernel_knobs`' flags (no-op when absent)."""
    if getattr(args, "attention_maxnreg", None) is not None:
        from samebits.kernels.triton import attention

        attention.ATTENTION_MAXNREG = args.attention_maxnreg
    if getattr(args, "sha256_rows_per_program", None) is not None:
        from samebits.kernels.triton import sha256

        sha256.ROWS_PER_PROGRAM = args.sha256_rows_per_program
