"""Launch sweep for the split-plan linear on the H200: which launches of the plan (tile shapes,
warps, stages, tile groups; pointer loads or TMA descriptors) reach cuBLAS.

Every candidate is a :class:`Launch` of the package's own kernels (`linear(..., launch)`), so
it computes the weight's split plan; each cell first checks that the candidate's output has the
same bits as the shipped choice's (integer views), then times it from CUDA graphs with a cold
L2 (``gpu_ops.bench_graph``). The exploratory kernel variants behind the launch tables of
2026-11-30 (a grouped pointer-load kernel, a -0.0-initialized flat loop, nested-if flushes)
were timed by this script at commit c6282dd (`...-linear-sweep1/2/3.json`).

    python benchmarks/linear_sweep.py --out $OUT/linear_sweep.json   # launch candidates
    python benchmarks/linear_sweep.py --fixed                        # by-M vs M-independent
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import torch  # noqa: E402

from samebits.kernels.triton.launches import Launch, pointer_kind  # noqa: E402
from samebits.kernels.triton.linear import choose_launch, linear, split_plan  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}

S1_LARGE = [(128, 256, 8, 3, 8), (128, 256, 8, 4, 8), (128, 128, 8, 3, 8)]
S1_MID = [(64, 32, 4, 6, 8), (128, 32, 4, 6, 8), (64, 64, 4, 6, 8), (128, 64, 4, 5, 8),
          (64, 128, 4, 5, 8), (128, 128, 8, 4, 8)]  # fmt: skip
SMALL = [(16, 32, 4, 6, 1), (16, 32, 4, 8, 1), (16, 16, 4, 8, 1), (16, 64, 4, 8, 1),
         (32, 32, 4, 8, 1), (64, 64, 4, 6, 1)]  # fmt: skip
SPLIT = [(128, 128, 8, 3, 8), (128, 128, 8, 4, 8), (64, 128, 4, 4, 8), (128, 64, 4, 4, 8),
         (64, 256, 8, 3, 8), (64, 64, 4, 4, 8), (64, 128, 4, 3, 8)]  # fmt: skip


# 32 < M <= 256 (decode batches; 2026-12-01): narrower tiles for more programs on 132 SMs,
# one m-tile for the whole batch (each weight tile read once), deeper pipelines.
DECODE = [(64, 16, 4, 8, 8), (64, 32, 4, 6, 8), (64, 32, 4, 8, 8), (64, 32, 2, 8, 8),
          (64, 64, 4, 4, 8), (64, 64, 4, 6, 8), (32, 64, 4, 4, 8), (64, 64, 8, 4, 8),
          (64, 128, 4, 4, 8), (128, 32, 4, 6, 8), (128, 64, 4, 4, 8), (128, 64, 8, 5, 8)]  # fmt: skip


def configs_for(m: int, splits: int) -> list[tuple]:
    if m <= 32:
        return SMALL
    if m <= 256:
        return DECODE
    if splits > 1:
        return SPLIT
    return S1_LARGE if m >= 512 else S1_MID


def _bits(t):
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def sweep(out: Path, ms: list[int], roles: list[str], deadline: float) -> None:
    results: list[dict] = []
    for m in ms:
        for role in roles:
            rec = _cell(role, m, deadline)
            print(json.dumps({k: v for k, v in rec.items() if k != "cands"}), flush=True)
            results.append(rec)
            out.write_text(json.dumps(results, indent=1))


def _cell(role: str, m: int, deadline: float) -> dict:
    """cuBLAS, the shipped launch and every candidate of (role, m); the fastest same-bits one."""
    from gpu_ops import bench_graph

    n, k = SHAPES[role]
    plan = split_plan(n, k, role)
    gen = torch.Generator(device="cuda").manual_seed(m)
    w = (torch.randn((n, k), generator=gen, device="cuda") * k**-0.5).bfloat16()
    x = torch.randn((m, k), generator=gen, device="cuda").bfloat16()
    base = linear(x, w, None, plan, torch.bfloat16)
    rec = {"role": role, "m": m, "S": plan.splits,
           "cublas_ms": bench_graph(lambda: torch.nn.functional.linear(x, w), 30),
           "shipped_ms": bench_graph(lambda: linear(x, w, None, plan, torch.bfloat16), 30),
           "cands": []}  # fmt: skip
    for kind in (pointer_kind(plan), "tma"):
        for cfg in configs_for(m, plan.splits):
            if time.time() < deadline:
                launch = Launch(kind, *cfg[:4], cfg[4] if kind == "tma" else 1)
                rec["cands"].append(_one(launch, x, w, plan, base, bench_graph))
    same = [c for c in rec["cands"] if c.get("same")]
    rec["best"] = min(same, key=lambda c: c["ms"], default=None)
    return rec


def fixed_vs_by_m(out: Path, ms: list[int], roles: list[str]) -> None:
    """What picking tiles by M buys (issue 9): per (role, M) the launch the plan picks for M
    against the two M-independent choices, the plan's smallest-M launch and its largest-M
    launch used at every M (all three certified equal, compared bit for bit here too)."""
    from gpu_ops import bench_graph

    rows = []
    for role in roles:
        n, k = SHAPES[role]
        plan = split_plan(n, k, role)
        w = (torch.randn((n, k), device="cuda") * k**-0.5).bfloat16()
        fixed = {"small": choose_launch(plan, 1), "large": choose_launch(plan, 1 << 40)}
        for m in ms:
            x = torch.randn((m, k), device="cuda").bfloat16()
            launches = {"by_m": choose_launch(plan, m), **fixed}
            outs = {
                key: linear(x, w, None, plan, torch.bfloat16, la) for key, la in launches.items()
            }
            same = all(torch.equal(_bits(o), _bits(outs["by_m"])) for o in outs.values())
            row = {"role": role, "m": m, "same_bits": same}
            for key, la in launches.items():
                call = partial(linear, x, w, None, plan, torch.bfloat16, la)
                row[f"{key}_us"] = 1e3 * bench_graph(call, 30)
            print(json.dumps(row), flush=True)
            rows.append(row)
            out.write_text(json.dumps(rows, indent=1))


def _one(launch: Launch, x, w, plan, base, bench_graph) -> dict:
    call = partial(linear, x, w, None, plan, torch.bfloat16, launch)
    try:
        same = bool(torch.equal(_bits(call()), _bits(base)))
        return {"launch": repr(launch), "same": same, "ms": bench_graph(call, 30)}
    except Exception as exc:  # a config that does not compile is data, not a failure
        return {"launch": repr(launch), "error": f"{type(exc).__name__}: {exc}"[:300]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "sweep.json")
    ap.add_argument("--ms", type=int, nargs="+", default=[2048, 8192, 512, 128, 1, 8, 32])
    ap.add_argument("--roles", nargs="+", default=list(SHAPES))
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument("--fixed", action="store_true", help="by-M launches vs M-independent ones")
    args = ap.parse_args()
    if args.fixed:
        fixed_vs_by_m(args.out, args.ms, args.roles)
        return
    sweep(args.out, args.ms, args.roles, time.time() + args.budget_s)


if __name__ == "__main__":
    main()
