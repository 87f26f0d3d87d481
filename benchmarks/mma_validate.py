"""Validate the CPU MMA emulator against the GPU: bits of bf16 tl.dot chains (fp32 accumulate)
on the device vs samebits.kernels.cpu.mma_emu, on random inputs of every class of mma_cases
(normal, uniform, exponent spreads 2^+-24 / 2^+-60 / every finite exponent, cancelling pairs,
signed zeros, bf16 subnormals, subnormal results, inf/NaN, near-max values, any accumulator)
and K from 16 to 4096.

Usage (on the H200, from the repo root):
    PYTHONPATH=$PWD/src python benchmarks/mma_validate.py --out $OUT/mma_validate.json
Options: --dots (total dot products, default 1e9), --threads (emulator threads, default all
cores), --max-seconds (stop starting cells after this, default 240), --rounds, --seed.

Each cell (kind, K, M=N) is regenerated offline by
`mma_cases.make_case(kind, M, N, K, np.random.default_rng([seed, round, cell]))`. Besides the
default model's mismatches, the first round's cells also compare their first rows under every
MmaModel switch (`variants`): where the default is off, they say which behaviour the GPU has. The
JSON is rewritten after every cell; mismatching outputs (up to 1024 a cell: row, column, GPU
and emulator bits) go to OUT_mismatches.npz beside it. Exit status 0 when no output differs
and the qualification probe passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from dataclasses import asdict, fields
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from samebits.kernels.cpu import mma_cases, mma_emu  # noqa: E402
from samebits.kernels.cpu.mma_model import MmaModel  # noqa: E402

# (K, relative share of the dot products): many short chains, fewer long ones
K_PLAN = ((16, 4.0), (32, 4.0), (48, 2.0), (64, 4.0), (112, 1.0), (256, 2.0), (1024, 1.0),
          (4096, 0.25))  # fmt: skip
# (BLOCK_M, num_warps) of the GPU kernel, in turn by cell: wgmma (64, 128) and mma.sync (16)
CONFIGS = ((64, 4), (128, 8), (16, 4))
VARIANT_ROWS = 64
EXAMPLES = 5
SAVED = 1024  # mismatching outputs per cell kept in the _mismatches.npz beside --out
SWITCHES = [f.name for f in fields(MmaModel)]


CLASSES = ("nan_payload", "nan_vs_value", "inf_vs_finite", "zero_sign", "subnormal_or_zero",
           "sign", "ulp1", "ulp<=16", "other")  # fmt: skip


def classify(gpu: np.ndarray, emu: np.ndarray) -> dict[str, int]:
    """Counts per mismatch class of differing fp32 bit patterns (1-d uint32 arrays)."""
    g, e = gpu.view(np.float32), emu.view(np.float32)
    gn, en = np.isnan(g), np.isnan(e)
    tiny = ((gpu & 0x7F800000) == 0) | ((emu & 0x7F800000) == 0)
    ulps = np.abs(gpu.astype(np.int64) - emu.astype(np.int64))
    conditions = [
        gn & en, gn | en, np.isinf(g) | np.isinf(e), (g == 0) & (e == 0), tiny,
        ((gpu ^ emu) >> 31) == 1, ulps == 1, ulps <= 16,
    ]  # fmt: skip
    which = np.select(conditions, np.arange(len(conditions)), default=len(conditions))
    counts = np.bincount(which, minlength=len(CLASSES))
    return {name: int(n) for name, n in zip(CLASSES, counts, strict=True) if n}


def plan(dots: float, rounds: int) -> list[tuple[int, str, int, int]]:
    """(round, kind, K, size) cells: each round covers every kind and K once."""
    share = sum(s for _, s in K_PLAN) * len(mma_cases.KINDS) * rounds
    cells = []
    for r in range(rounds):
        for k, s in K_PLAN:
            for kind in sorted(mma_cases.KINDS):
                side = math.sqrt(dots * s / share)
                cells.append((r, kind, k, int(min(8192, max(64, round(side / 64) * 64)))))
    return cells


def gpu_chain(x, w, acc, config: tuple[int, int] = (64, 4)):
    import torch

    from samebits.kernels.triton import mma_probe

    t = [torch.from_numpy(a.view(d)).cuda() for a, d in ((x, np.int16), (w, np.int16),
                                                         (acc, np.int32))]  # fmt: skip
    y = mma_probe.chain_bits(*t, block_m=config[0], num_warps=config[1])
    torch.cuda.synchronize()
    return y.cpu().numpy().view(np.uint32)


def run_cell(cell: tuple[int, str, int, int], index: int, seed: int, threads: int) -> dict:
    rnd, kind, k, size = cell
    x, w, acc = mma_cases.make_case(kind, size, size, k, np.random.default_rng([seed, rnd, index]))
    config = CONFIGS[(index + index // len(mma_cases.KINDS)) % len(CONFIGS)]
    t0 = time.perf_counter()
    gpu = gpu_chain(x, w, acc, config)
    t1 = time.perf_counter()
    emu = mma_emu.chain_bits(x, w, acc, threads=threads)
    t2 = time.perf_counter()
    bad = np.argwhere(gpu != emu)
    classes = classify(gpu[gpu != emu], emu[gpu != emu])
    rows = slice(0, min(size, VARIANT_ROWS) if rnd == 0 else 0)  # switches: first round only
    variants = {}
    for name in SWITCHES if rows.stop else ():
        alt = mma_emu.chain_bits(x[rows], w, acc[rows], MmaModel(**{name: True}), threads)
        variants[name] = int((alt != gpu[rows]).sum())
    examples = [
        {"row": int(i), "col": int(j), "gpu": f"{int(gpu[i, j]):08x}", "emu": f"{int(emu[i, j]):08x}"}
        for i, j in bad[:EXAMPLES]
    ]  # fmt: skip
    keep = bad[:SAVED]
    saved = (keep, gpu[keep[:, 0], keep[:, 1]], emu[keep[:, 0], keep[:, 1]])
    return {
        "index": index, "round": rnd, "kind": kind, "K": k, "M": size, "N": size,
        "seed": [seed, rnd, index], "block_m": config[0], "warps": config[1], "saved": saved,
        "dots": size * size, "mismatches": int(len(bad)), "classes": classes,
        "variant_rows": rows.stop, "default_on_variant_rows": int((emu[rows] != gpu[rows]).sum()),
        "variants": variants, "examples": examples, "gpu_s": t1 - t0, "emu_s": t2 - t1,
    }  # fmt: skip


def save_mismatches(cell: dict, saved: dict, out: Path) -> None:
    """Keep the cell's mismatching outputs (row, col, GPU bits, emulator bits) in
    OUT_mismatches.npz, arrays named c<index>_*, for fitting offline with make_case."""
    where, gpu, emu = cell.pop("saved")
    if len(where):
        i = cell["index"]
        saved.update({f"c{i}_rows": where[:, 0], f"c{i}_cols": where[:, 1], f"c{i}_gpu": gpu,
                      f"c{i}_emu": emu})  # fmt: skip
        out.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(out.with_name(out.stem + "_mismatches.npz"), **saved)


def summary(cells: list[dict], started: float, threads: int, emu_s: float) -> dict:
    by_kind: dict[str, dict[str, int]] = {}
    by_class: dict[str, int] = {}
    for c in cells:
        entry = by_kind.setdefault(c["kind"], {"dots": 0, "mismatches": 0})
        entry["dots"] += c["dots"]
        entry["mismatches"] += c["mismatches"]
        for name, count in c["classes"].items():
            by_class[name] = by_class.get(name, 0) + count
    dots = sum(c["dots"] for c in cells)
    steps = sum(c["dots"] * c["K"] // 16 for c in cells)
    return {
        "dots": dots, "mma_steps": steps, "mismatches": sum(c["mismatches"] for c in cells),
        "by_kind": by_kind, "by_class": by_class, "elapsed_s": time.perf_counter() - started,
        "emulator_s": emu_s, "emulator_threads": threads,
        "emulator_dots_per_s": dots / emu_s if emu_s else None,
        "emulator_steps_per_s": steps / emu_s if emu_s else None,
    }  # fmt: skip


def environment() -> dict:
    import torch
    import triton

    return {
        "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
        "triton": triton.__version__, "cuda": torch.version.cuda, "host_cpus": os.cpu_count(),
        "cpu": platform.processor() or platform.machine(), "emulator_build": mma_emu.build_key(),
    }  # fmt: skip


def probe_result() -> dict:
    from samebits.kernels.triton import mma_probe

    report = mma_probe.qualify()
    return {"passed": report.passed, "outputs": report.outputs, "mismatches": report.mismatches,
            "vectors_sha256": mma_probe.vectors_sha256()}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--dots", type=float, default=1e9)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--max-seconds", type=float, default=240.0)
    ap.add_argument("--seed", type=int, default=27)
    args = ap.parse_args()
    if not mma_emu.available():
        raise SystemExit(f"the native emulator does not build here: {mma_emu.build_error()}")
    started = time.perf_counter()
    result = {"environment": environment(), "probe": probe_result(), "model": asdict(MmaModel())}
    print("probe:", result["probe"], flush=True)
    cells: list[dict] = []
    saved: dict[str, np.ndarray] = {}
    emu_s = 0.0
    schedule = plan(args.dots, args.rounds)
    for index, cell in enumerate(schedule):
        if time.perf_counter() - started > args.max_seconds:
            result["stopped_early"] = f"after {index} of {len(schedule)} cells (--max-seconds)"
            break
        cells.append(run_cell(cell, index, args.seed, args.threads))
        emu_s += cells[-1]["emu_s"]
        save_mismatches(cells[-1], saved, args.out)
        c = cells[-1]
        print(f"{c['kind']:>13} K={c['K']:<5} {c['M']}x{c['N']} mismatches={c['mismatches']} "
              f"gpu {c['gpu_s']:.2f}s emu {c['emu_s']:.2f}s", flush=True)  # fmt: skip
        result.update(summary=summary(cells, started, args.threads, emu_s), cells=cells)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))
    s = result["summary"]
    print(f"{s['dots']:.3e} dot products, {s['mismatches']} mismatches; probe passed: "
          f"{result['probe']['passed']}; {s['elapsed_s']:.0f}s", flush=True)  # fmt: skip
    return 0 if s["mismatches"] == 0 and result["probe"]["passed"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
