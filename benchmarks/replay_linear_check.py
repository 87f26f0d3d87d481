"""The GPU invariant plan's linears vs their CPU replay (samebits.kernels.replay), as bits, and a
PTX/SASS survey of every invariant-plan kernel (issue 27, second part).

Usage (on the H200, from the repo root):
    PYTHONPATH=$PWD/src python benchmarks/replay_linear_check.py --out $OUT/replay_linear.json
Options: --cols (output columns replayed per weight, default 4096: the first and last halves,
so the last n-tile is included), --ms (default 1 3 16 64 200), --all-launches (every row of
the launch table, TMA and pointer forms, at every M; default: the launches the plan picks for
that M, with and without TMA), --no-survey, --seed.

Part 1: random bf16 weights of the Llama-3-8B linears (qkv 6144x4096, o 4096x4096, gate_up
28672x4096, down 4096x14336, lm_head 128256x4096) and of the tiny models (K 48..768, bias,
S = 1/2/4), x random bf16 [M, K]. The GPU runs each launch on the full weight (the launch table
depends on N); the CPU replays the columns `--cols` (a weight row's outputs depend on that row
only; the replay's plan is the full weight's). Counted as bits: the outputs, the split-K grid's
partials (S > 1), and the fused `sum_add_rms_norm` kernel's residual (its linear sum + residual
add; its RMSNorm is not replayed). Part 2 (survey): a fresh TRITON_CACHE_DIR collects the PTX
(and, with cuobjdump, the SASS) of every kernel part 1 compiles plus those of tiny Llama, Qwen2,
Qwen3 and Qwen3-MoE engines generating a few tokens on the invariant plan; per kernel: counts of
approximate, fused and special float instructions (what a CPU replay of the whole plan must
define). Exit status 0 when no replayed bit differs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

# (name, role, N, K, bias)
SHAPES = (
    ("8b.qkv", "qkv", 6144, 4096, False),
    ("8b.o", "o", 4096, 4096, False),
    ("8b.gate_up", "gate_up", 28672, 4096, False),
    ("8b.down", "down", 4096, 14336, False),
    ("8b.lm_head", "lm_head", 128256, 4096, False),
    ("tiny.qkv.bias", "qkv", 128, 64, True),  # K = 64: one step per range, with a bias
    ("tiny.o", "o", 64, 64, False),
    ("tiny.gate_up", "gate_up", 256, 64, False),
    ("tiny.down", "down", 64, 128, False),
    ("tiny.lm_head", "lm_head", 320, 64, False),
    ("small.qkv.bias", "qkv", 512, 256, True),
    ("small.down.s4", "down", 256, 768, True),  # S = 4, 3 steps per range, bias
    ("small.o.k48", "o", 32, 48, False),  # block_k 32, the second step half masked
)
FLOAT32_ROLES = ("lm_head", "router")
EXAMPLES = 8
PTX_PATTERNS = {
    "ex2.approx": r"\bex2\.approx", "lg2.approx": r"\blg2\.approx",
    "rsqrt.approx": r"\brsqrt\.approx", "sqrt.approx": r"\bsqrt\.approx",
    "rcp.approx": r"\brcp\.approx", "div.approx": r"\bdiv\.approx", "div.full": r"\bdiv\.full",
    "tanh.approx": r"\btanh\.approx", "sin.approx": r"\bsin\.approx",
    "cos.approx": r"\bcos\.approx", "div.rn.f32": r"\bdiv\.rn(\.ftz)?\.f32",
    "sqrt.rn.f32": r"\bsqrt\.rn(\.ftz)?\.f32", "rcp.rn.f32": r"\brcp\.rn(\.ftz)?\.f32",
    "fma.f32": r"\bfma\.rn(\.ftz)?(\.sat)?\.f32\b", "mul.f32": r"\bmul(\.rn)?(\.ftz)?\.f32\b",
    "add.f32": r"\badd(\.rn)?(\.ftz)?\.f32\b", "sub.f32": r"\bsub(\.rn)?(\.ftz)?\.f32\b",
    "ftz": r"\.ftz\.", "max.f32": r"\bmax(\.NaN)?(\.ftz)?\.f32", "min.f32": r"\bmin(\.NaN)?(\.ftz)?\.f32",
    "cvt.bf16.f32": r"\bcvt\.rn(\.relu)?\.bf16(x2)?\.f32", "mma.sync": r"\bmma\.sync",
    "wgmma": r"\bwgmma\.mma_async", "atom": r"\batom\.", "red": r"\bred\.",
}  # fmt: skip
SASS_PATTERNS = {
    "MUFU.EX2": r"MUFU\.EX2", "MUFU.LG2": r"MUFU\.LG2", "MUFU.RSQ": r"MUFU\.RSQ",
    "MUFU.RCP": r"MUFU\.RCP", "MUFU.SQRT": r"MUFU\.SQRT", "MUFU.TANH": r"MUFU\.TANH",
    "MUFU.SIN": r"MUFU\.SIN", "MUFU.COS": r"MUFU\.COS", "FFMA": r"\bFFMA\b", "FMUL": r"\bFMUL\b",
    "FADD": r"\bFADD\b", "FMNMX": r"\bFMNMX\b", "HMMA": r"\bHMMA\b", "HGMMA": r"\bHGMMA\b",
}  # fmt: skip


def _bits(t):
    """A CUDA/CPU tensor's bits as a numpy uint16/uint32 array."""
    import torch

    view = {torch.bfloat16: torch.int16, torch.float32: torch.int32}[t.dtype]
    out = t.detach().cpu().contiguous().view(view).numpy()
    return out.view(np.uint16 if view == torch.int16 else np.uint32)


def _columns(n: int, cols: int) -> np.ndarray:
    """The replayed output columns: all, or the first and last cols / 2 (the edge n-tile)."""
    if n <= cols:
        return np.arange(n)
    return np.concatenate([np.arange(cols // 2), np.arange(n - cols // 2, n)])


def _launches(plan, m: int, every: bool) -> list:
    from samebits.kernels.triton.launches import Launch, choose_launch, launch_table, pointer_kind

    if not every:
        picked = [choose_launch(plan, m, True), choose_launch(plan, m, False)]
    else:
        picked = []
        for row in launch_table(plan):
            _, kind, bm, bn, warps, stages, group = row
            picked.append(Launch(kind, bm, bn, warps, stages, group))
            picked.append(Launch(pointer_kind(plan), bm, bn, warps, stages, 1))
    return list(dict.fromkeys(picked))


def _compare(gpu: np.ndarray, cpu: np.ndarray) -> dict:
    diff = np.argwhere(gpu != cpu)
    examples = [
        {"row": int(i), "col": int(j), "gpu": hex(int(gpu[i, j])), "cpu": hex(int(cpu[i, j]))}
        for i, j in diff[:EXAMPLES]
    ]  # fmt: skip
    return {"outputs": int(gpu.size), "mismatches": int(len(diff)), "examples": examples}


class Weight:
    """One random weight on the GPU and its replay (the replayed columns) on the CPU."""

    def __init__(self, name, role, n, k, has_bias, cols, gen):
        import torch

        from samebits.kernels.replay import ReplayLinear
        from samebits.kernels.splitplan import split_plan

        self.name, self.role = name, role
        self.plan = split_plan(n, k, role)
        self.w = (torch.randn((n, k), generator=gen, device="cuda") * 0.02).to(torch.bfloat16)
        self.b = torch.randn(n, generator=gen, device="cuda") if has_bias else None
        self.out_dtype = torch.float32 if role in FLOAT32_ROLES else torch.bfloat16
        self.cols = _columns(n, cols)
        sel = torch.from_numpy(self.cols).cuda()
        t0 = time.perf_counter()
        self.replay = ReplayLinear(
            _bits(self.w[sel]), None if self.b is None else _bits(self.b[sel]).view(np.float32),
            replace(self.plan, n=len(self.cols)), str(self.out_dtype).removeprefix("torch."),
        )  # fmt: skip
        self.decode_s = time.perf_counter() - t0


def _fused_check(wt: Weight, x, partials, cpu_partials, gen) -> dict:
    """sum_add_rms_norm's residual (ordered sum + bias, cast, + residual) vs the replay's."""
    import torch

    from samebits.kernels.replay import sum_add_residual
    from samebits.kernels.triton import rows

    res = torch.randn((x.shape[0], wt.plan.n), generator=gen, device="cuda")
    res_cpu = res.cpu().numpy()[:, wt.cols]
    norm_w = torch.ones(wt.plan.n, device="cuda")
    rows.sum_add_rms_norm(partials, wt.b, res, norm_w, 1e-5, torch.bfloat16)
    bias = None if wt.b is None else _bits(wt.b).view(np.float32)[wt.cols]
    _, want = sum_add_residual(cpu_partials, bias, res_cpu)
    return _compare(_bits(res)[:, wt.cols], want.view(np.uint32))


def _check_m(wt: Weight, m: int, every: bool, gen) -> list[dict]:
    import torch

    from samebits.kernels.replay import ordered_sum
    from samebits.kernels.triton.launches import SPLIT_GRID
    from samebits.kernels.triton.linear import linear, split_partials

    x = torch.randn((m, wt.plan.k), generator=gen, device="cuda").to(torch.bfloat16)
    t0 = time.perf_counter()
    cpu_partials = wt.replay.partials(_bits(x))
    cpu = ordered_sum(cpu_partials, wt.replay.bias, wt.replay.out_dtype)
    cpu_s = time.perf_counter() - t0
    out = []
    for launch in _launches(wt.plan, m, every):
        y = linear(x, wt.w, wt.b, wt.plan, wt.out_dtype, launch=launch)
        rec = {"weight": wt.name, "m": m, "launch": asdict(launch), "cpu_s": round(cpu_s, 4)}
        rec["output"] = _compare(_bits(y)[:, wt.cols], cpu)
        if launch.kind == SPLIT_GRID:
            p = split_partials(x, wt.w, wt.plan, launch)
            rec["partials"] = _compare(
                _bits(p)[:, :, wt.cols].reshape(-1, len(wt.cols)),
                cpu_partials.reshape(-1, len(wt.cols)),
            )  # fmt: skip
            if wt.out_dtype == torch.bfloat16:
                rec["fused_residual"] = _fused_check(wt, x, p, cpu_partials, gen)
        out.append(rec)
    return out


def check_linears(args) -> list[dict]:
    import torch

    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    records = []
    for name, role, n, k, has_bias in SHAPES:
        wt = Weight(name, role, n, k, has_bias, args.cols, gen)
        for m in args.ms:
            for rec in _check_m(wt, m, args.all_launches, gen):
                records.append(rec)
                bad = sum(rec[key]["mismatches"] for key in ("output", "partials",
                          "fused_residual") if key in rec)  # fmt: skip
                print(f"{name:16s} M={m:<4d} {rec['launch']['kind']:10s} "
                      f"{rec['launch']['block_m']}x{rec['launch']['block_n']} "
                      f"mismatches {bad}  cpu {rec['cpu_s']:.2f}s", flush=True)  # fmt: skip
        print(f"{name}: plan {asdict(wt.plan)}, decode {wt.decode_s:.2f}s", flush=True)
        Path(args.out).write_text(json.dumps({"partial": True, "records": records}, indent=1))
        del wt
        torch.cuda.empty_cache()
    return records


def _run_engines() -> list[str]:
    """Tiny engines on the invariant plan: compile the row, attention, MoE, digest kernels."""
    import torch

    sys.path.insert(0, str(ROOT / "tests"))
    from samebits import LLM, SamplingParams
    from tiny_models import make_tiny_checkpoint

    done = []
    for arch in ("llama", "qwen2", "qwen3", "qwen3_moe"):
        path = make_tiny_checkpoint(Path(tempfile.mkdtemp()) / arch, arch)
        llm = LLM(str(path), device="cuda", gpu_memory_utilization=0.2)
        llm.generate(["Hello there", "The capital of"], SamplingParams(max_tokens=8, temperature=0))
        done.append(arch)
        del llm
        gc.collect()
        torch.cuda.empty_cache()
    return done


def _count(text: str, patterns: dict[str, str]) -> dict[str, int]:
    counts = {key: len(re.findall(rx, text)) for key, rx in patterns.items()}
    return {key: c for key, c in counts.items() if c}


def _cuobjdump() -> str | None:
    try:
        import triton.backends.nvidia as nv

        bundled = Path(nv.__file__).parent / "bin" / "cuobjdump"
        if bundled.exists():
            return str(bundled)
    except ImportError:
        pass
    return shutil.which("cuobjdump")


def _sass(cubin: Path, tool: str | None) -> dict[str, int] | None:
    if tool is None or not cubin.exists():
        return None
    proc = subprocess.run([tool, "--dump-sass", str(cubin)], capture_output=True, text=True)
    return _count(proc.stdout, SASS_PATTERNS) if proc.returncode == 0 else None


def _fresh_triton_cache() -> Path:
    """A new TRITON_CACHE_DIR (set before triton is imported): every kernel this run compiles
    leaves its PTX and cubin there."""
    cache = Path(tempfile.mkdtemp(prefix="samebits-replay-triton-"))
    os.environ["TRITON_CACHE_DIR"] = str(cache)
    return cache


def survey(cache: Path, engines: list[str], error: str | None) -> dict:
    """Per kernel: its compiled variants' PTX (and SASS) instruction counts."""
    tool = _cuobjdump()
    kernels: dict[str, list] = {}
    for ptx in sorted(cache.rglob("*.ptx")):
        meta = ptx.with_suffix(".json")
        info = json.loads(meta.read_text()) if meta.exists() else {}
        kernels.setdefault(ptx.stem, []).append({
            "variant": ptx.parent.name[:16], "num_warps": info.get("num_warps"),
            "ptx": _count(ptx.read_text(), PTX_PATTERNS), "sass": _sass(ptx.with_suffix(".cubin"), tool),
        })  # fmt: skip
    return {"engines": engines, "engine_error": error, "sass_tool": tool, "kernels": kernels}


SUMMARY_KEYS = (
    "ex2.approx",
    "lg2.approx",
    "rsqrt.approx",
    "sqrt.approx",
    "rcp.approx",
    "div.approx",
    "div.full",
    "tanh.approx",
    "fma.f32",
    "ftz",
    "atom",
    "red",
)


def print_survey(result: dict) -> None:
    """One line per kernel: the largest count over its variants of each key that occurs."""
    for name, variants in sorted(result["kernels"].items()):
        top = {k: max(v["ptx"].get(k, 0) for v in variants) for k in SUMMARY_KEYS}
        sass = {k: max((v["sass"] or {}).get(k, 0) for v in variants) for k in SASS_PATTERNS}
        shown = {k: c for k, c in {**top, **sass}.items() if c and not k.startswith(("H", "FADD",
                 "FMUL", "FMNMX"))}  # fmt: skip
        print(f"survey {name[:40]:40s} variants {len(variants):3d} {shown}")
    print(f"survey engines {result['engines']} error {result['engine_error']}")


def _engines_or_error() -> tuple[list[str], str | None]:
    try:
        return _run_engines(), None
    except Exception as exc:  # the survey still reports what compiled
        return [], f"{type(exc).__name__}: {exc}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--cols", type=int, default=4096)
    ap.add_argument("--ms", type=int, nargs="+", default=[1, 3, 16, 64, 200])
    ap.add_argument("--all-launches", action="store_true")
    ap.add_argument("--no-survey", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    cache = _fresh_triton_cache()
    import torch

    from samebits.kernels.cpu import mma_emu

    t0 = time.perf_counter()
    records = check_linears(args)
    total = sum(r[k]["mismatches"] for r in records for k in ("output", "partials",
                "fused_residual") if k in r)  # fmt: skip
    result = {
        "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "emulator_build": mma_emu.build_key(), "cpu_cores": os.cpu_count(),
        "args": vars(args), "linear_s": round(time.perf_counter() - t0, 1),
        "launches_checked": len(records), "mismatches": total, "records": records,
    }  # fmt: skip
    if not args.no_survey:  # the linears' kernels first: kept if the engines run out of time
        result["survey"] = survey(cache, [], "not run yet")
    Path(args.out).write_text(json.dumps(result, indent=1))
    if not args.no_survey:
        result["survey"] = survey(cache, *_engines_or_error())
        Path(args.out).write_text(json.dumps(result, indent=1))
        print_survey(result["survey"])
    print(f"{len(records)} launches, {total} mismatching bits-words; "
          f"{time.perf_counter() - t0:.0f}s; JSON {args.out}")  # fmt: skip
    return 0 if total == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
