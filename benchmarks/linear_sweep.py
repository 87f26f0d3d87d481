"""Launch sweep for the split-plan linear on the H200: which tile shapes, tile orders and load
paths (pointer loads vs TMA descriptors) reach cuBLAS, with bits equal to the shipped kernel.

Every candidate computes the same split plan as ``samebits.kernels.triton.linear`` (BK-wide
``tl.dot`` chains per K range, ranges summed in order); each cell first checks that the
candidate's output has the same bits as the shipped kernel's (integer views), then times it
from CUDA graphs with a cold L2 (``gpu_ops.bench_graph``). Candidates:

- ``ptr``: pointer loads, 1-D grid in grouped tile order (GROUP_M m-tiles share a weight
  panel), k masks dropped when every range is whole (EVEN_K), S ranges in one program;
- ``tma``: the same with TMA tensor descriptors (out-of-bounds rows / columns read as zeros,
  which is what the masked loads give).

    python benchmarks/linear_sweep.py --out $OUT/linear_sweep.json   # GPU
    TRITON_INTERPRET=1 python benchmarks/linear_sweep.py --selftest  # CPU, fp32, tiny shapes
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
import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from samebits.kernels.triton.linear import linear, split_plan  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}


@triton.jit
def _tile_of(pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped order: GROUP_M consecutive m-tiles walk the n-tiles together."""
    tiles_m = tl.cdiv(M, BLOCK_M)
    tiles_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * tiles_n
    first_m = (pid // per_group) * GROUP_M
    rows_in_group = tl.minimum(tiles_m - first_m, GROUP_M)
    local = pid % per_group
    return first_m + local % rows_in_group, local // rows_in_group


@triton.jit
def _chain_ptr(x_ptr, w_ptr, rm, rn, M, N, K, k_lo, RANGE_K: tl.constexpr, EVEN_K: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    rk = tl.arange(0, BLOCK_K)
    k_hi = tl.minimum(K, k_lo + RANGE_K)
    x_rows = x_ptr + rm.to(tl.int64)[:, None] * K
    w_cols = w_ptr + rn.to(tl.int64)[None, :] * K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, RANGE_K, BLOCK_K):
        kk = k_lo + k0 + rk
        if EVEN_K:
            a = tl.load(x_rows + kk[None, :], mask=rm[:, None] < M, other=0.0)
            b = tl.load(w_cols + kk[:, None], mask=rn[None, :] < N, other=0.0)
        else:
            a = tl.load(x_rows + kk[None, :], mask=(rm[:, None] < M) & (kk[None, :] < k_hi),
                        other=0.0)  # fmt: skip
            b = tl.load(w_cols + kk[:, None], mask=(rn[None, :] < N) & (kk[:, None] < k_hi),
                        other=0.0)  # fmt: skip
        acc = tl.dot(a, b, acc, input_precision="ieee")
    return acc


@triton.jit(do_not_specialize=["M"])
def ptr_kernel(x_ptr, w_ptr, y_ptr, M, N, K, RANGE_K: tl.constexpr, SPLITS: tl.constexpr,
               EVEN_K: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
               BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):  # fmt: skip
    pid_m, pid_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    total = _chain_ptr(x_ptr, w_ptr, rm, rn, M, N, K, 0, RANGE_K, EVEN_K, BLOCK_M, BLOCK_N,
                       BLOCK_K)  # fmt: skip
    for s in tl.static_range(1, SPLITS):
        total = total + _chain_ptr(x_ptr, w_ptr, rm, rn, M, N, K, s * RANGE_K, RANGE_K, EVEN_K,
                                   BLOCK_M, BLOCK_N, BLOCK_K)  # fmt: skip
    offs = rm.to(tl.int64)[:, None] * N + rn[None, :]
    tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))  # fmt: skip


@triton.jit
def _chain_tma(x_desc, w_desc, off_m, off_n, k_lo, RANGE_K: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, RANGE_K, BLOCK_K):
        a = x_desc.load([off_m, k_lo + k0])
        b = w_desc.load([off_n, k_lo + k0])
        acc = tl.dot(a, b.T, acc, input_precision="ieee")
    return acc


@triton.jit(do_not_specialize=["M"])
def tma_kernel(x_desc, w_desc, y_ptr, M, N, K, RANGE_K: tl.constexpr, SPLITS: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               GROUP_M: tl.constexpr):  # fmt: skip
    pid_m, pid_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    total = _chain_tma(x_desc, w_desc, off_m, off_n, 0, RANGE_K, BLOCK_M, BLOCK_N, BLOCK_K)
    for s in tl.static_range(1, SPLITS):
        total = total + _chain_tma(x_desc, w_desc, off_m, off_n, s * RANGE_K, RANGE_K, BLOCK_M,
                                   BLOCK_N, BLOCK_K)  # fmt: skip
    rm = off_m + tl.arange(0, BLOCK_M)
    rn = off_n + tl.arange(0, BLOCK_N)
    offs = rm.to(tl.int64)[:, None] * N + rn[None, :]
    tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))  # fmt: skip


@triton.jit(do_not_specialize=["M"])
def flat_kernel(x_desc, w_desc, y_ptr, M, N, K, RANGE_K: tl.constexpr, SPLITS: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                GROUP_M: tl.constexpr, WHERE: tl.constexpr):  # fmt: skip
    """One k loop over all S * STEPS steps; at each range's last step the chain is added to the
    running total (which starts at -0.0, the exact additive identity) and restarted at zero."""
    pid_m, pid_n = _tile_of(tl.program_id(0), M, N, BLOCK_M, BLOCK_N, GROUP_M)
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    STEPS: tl.constexpr = RANGE_K // BLOCK_K
    total = tl.full((BLOCK_M, BLOCK_N), -0.0, dtype=tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for i in range(0, SPLITS * STEPS):
        a = x_desc.load([off_m, i * BLOCK_K])
        b = w_desc.load([off_n, i * BLOCK_K])
        acc = tl.dot(a, b.T, acc, input_precision="ieee")
        last = (i % STEPS) == STEPS - 1
        if WHERE:
            total = tl.where(last, total + acc, total)
            acc = tl.where(last, 0.0, acc)
        else:
            if last:
                total = total + acc
                acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    rm = off_m + tl.arange(0, BLOCK_M)
    rn = off_n + tl.arange(0, BLOCK_N)
    offs = rm.to(tl.int64)[:, None] * N + rn[None, :]
    tl.store(y_ptr + offs, total.to(y_ptr.dtype.element_ty),
             mask=(rm[:, None] < M) & (rn[None, :] < N))  # fmt: skip


def run_candidate(kind: str, cfg: tuple, x, w, y, plan) -> None:
    bm, bn, warps, stages, group = cfg
    m, k = x.shape
    n = w.shape[0]
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    common = dict(RANGE_K=plan.range_k, SPLITS=plan.splits, BLOCK_M=bm, BLOCK_N=bn,
                  BLOCK_K=plan.block_k, GROUP_M=group, num_warps=warps, num_stages=stages)  # fmt: skip
    if kind == "ptr":
        even = plan.k % plan.range_k == 0
        ptr_kernel[grid](x, w, y, m, n, k, EVEN_K=even, **common)
    else:
        xd = TensorDescriptor.from_tensor(x, [bm, plan.block_k])
        wd = TensorDescriptor.from_tensor(w, [bn, plan.block_k])
        if kind == "tma":
            tma_kernel[grid](xd, wd, y, m, n, k, **common)
        else:
            flat_kernel[grid](xd, wd, y, m, n, k, WHERE=kind == "flatw", **common)


KINDS = ("tma", "flat", "flatw")
S1_LARGE = [(128, 256, 8, 3, 8), (128, 256, 8, 4, 8), (128, 128, 8, 3, 8)]
S1_MID = [(64, 32, 4, 6, 8), (128, 32, 4, 6, 8), (64, 64, 4, 6, 8), (128, 64, 4, 5, 8),
          (64, 128, 4, 5, 8), (128, 128, 8, 4, 8)]  # fmt: skip
SMALL = [(16, 32, 4, 6, 1), (16, 32, 4, 8, 1), (16, 16, 4, 8, 1), (16, 64, 4, 8, 1),
         (32, 32, 4, 8, 1), (64, 64, 4, 6, 1)]  # fmt: skip
SPLIT = [(128, 128, 8, 3, 8), (128, 128, 8, 4, 8), (64, 128, 4, 4, 8), (128, 64, 4, 4, 8),
         (64, 256, 8, 3, 8), (64, 64, 4, 4, 8), (64, 128, 4, 3, 8)]  # fmt: skip


def configs_for(m: int, splits: int) -> list[tuple]:
    if m <= 32:
        return SMALL
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
    for kind in KINDS if plan.splits > 1 else ("tma",):
        if plan.splits > 1 and kind == "tma":
            continue
        for cfg in configs_for(m, plan.splits):
            if time.time() < deadline:
                rec["cands"].append(_one(kind, cfg, x, w, plan, base, bench_graph))
    same = [c for c in rec["cands"] if c.get("same")]
    rec["best"] = min(same, key=lambda c: c["ms"], default=None)
    return rec


def fixed_vs_by_m(out: Path, ms: list[int], roles: list[str]) -> None:
    """What picking tiles by M buys (issue 9): per (role, M) the launch the plan picks for M
    against the two M-independent choices, the plan's smallest-M launch and its largest-M
    launch used at every M (all three certified equal, compared bit for bit here too)."""
    from gpu_ops import bench_graph

    from samebits.kernels.triton.linear import choose_launch

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


def _one(kind, cfg, x, w, plan, base, bench_graph) -> dict:
    y = torch.empty_like(base)
    try:
        run_candidate(kind, cfg, x, w, y, plan)
        torch.cuda.synchronize()
        same = bool(torch.equal(_bits(y), _bits(base)))
        ms = bench_graph(lambda: run_candidate(kind, cfg, x, w, y, plan), 30)
        return {"kind": kind, "cfg": cfg, "same": same, "ms": ms}
    except Exception as exc:  # a config that does not compile is data, not a failure
        return {"kind": kind, "cfg": cfg, "error": f"{type(exc).__name__}: {exc}"[:300]}


def selftest() -> None:
    """CPU interpreter: every candidate kind equals the shipped kernel bit for bit (fp32), with
    the tests' row-local model of ``tl.dot`` (tests/kernels/triton/conftest.py)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "kernels" / "triton"))
    import conftest  # noqa: F401  (patches the interpreter's dot)

    for n, k, role, m in ((96, 256, "o", 5), (80, 200, "qkv", 17), (64, 512, "down", 33)):
        plan = split_plan(n, k, role)
        x = torch.randn(m, k)
        w = torch.randn(n, k)
        base = linear(x, w, None, plan, torch.float32)
        for kind in ("ptr", "tma", "flat", "flatw"):
            for cfg in ((16, 32, 4, 2, 1), (32, 16, 4, 2, 2)):
                y = torch.empty_like(base)
                run_candidate(kind, cfg, x, w, y, plan)
                ok = torch.equal(_bits(y), _bits(base))
                print(role, m, kind, cfg, "same" if ok else "DIFFERENT")
                assert ok


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")) / "sweep.json")
    ap.add_argument("--ms", type=int, nargs="+", default=[2048, 8192, 512, 128, 1, 8, 32])
    ap.add_argument("--roles", nargs="+", default=list(SHAPES))
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--fixed", action="store_true", help="by-M launches vs M-independent ones")
    args = ap.parse_args()
    if args.selftest:
        selftest()
        return
    if args.fixed:
        fixed_vs_by_m(args.out, args.ms, args.roles)
        return
    sweep(args.out, args.ms, args.roles, time.time() + args.budget_s)


if __name__ == "__main__":
    main()
