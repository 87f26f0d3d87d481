"""The GPU plan's row kernels vs their CPU replay (samebits.kernels.replay.rows / .moe), as
bits (issue 27). The soft-exp SiLU / GeGLU speed: benchmarks/softexp_speed.py.

Usage (on the H200, from the repo root):
    PYTHONPATH=$PWD/src python benchmarks/replay_rows_check.py --out $OUT/replay_rows.json

Kernels (M in {1, 3, 64}, random rows plus an edge row: +-0, subnormals, +-inf, NaN, huge and
tiny values): rms_norm (fp32 and bf16 input), add_rms_norm, sum_add_rms_norm (S = 2, 4),
head_rms_norm, rope, qkv_rope_store, silu_mul / gelu_mul (the launched soft-exp kernels),
MoE route (torch ops on the GPU) and moe_combine_kernel.
Shapes: Llama-3-8B (hidden 4096, 32/8 heads x 128, inter 14336), tiny (hidden 256, 4/2 heads
x 64, inter 768), head dims 16 / 64 / 128. Output: mismatching elements per (kernel, shape,
M); exit status 0 when every replayed kernel matches.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

MS = (1, 3, 64)
EPS = 1e-5


def _edge(width: int) -> np.ndarray:
    row = np.zeros(width, np.float32)
    vals = [0.0, -0.0, 1e-40, -1e-40, 3e38, -3e38, 1e-30, 65504.0, np.inf, -np.inf, np.nan]
    row[: min(width, len(vals))] = vals[:width]
    return row


def _rows(rng, m: int, width: int, edge: bool = False) -> np.ndarray:
    x = (rng.standard_normal((m, width)) * 2.0 ** rng.integers(-6, 6, (m, width))).astype(
        np.float32
    )
    if edge and m > 1:
        x[-1] = _edge(width)
    return x


def _u16(t) -> np.ndarray:
    import torch

    return t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


def _u32(t) -> np.ndarray:
    return t.contiguous().cpu().numpy().view(np.uint32)


def _diff(a: np.ndarray, b: np.ndarray) -> int:
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return -1
    return int(np.count_nonzero(a.reshape(-1) != b.reshape(-1)))


class Check:
    def __init__(self):
        self.results: list[dict] = []

    def add(self, kernel: str, shape: str, m: int, mism: int, n: int, replayed=True):
        self.results.append(dict(kernel=kernel, shape=shape, m=m, mismatches=mism,
                                 elements=n, replayed=replayed))  # fmt: skip
        print(f"{kernel:28s} {shape:14s} M={m:<4d} {mism} / {n}", flush=True)


def check_rms(ck: Check, rng, width: int, tag: str):
    import torch

    from samebits.kernels.replay import rows as rr
    from samebits.kernels.triton import rows

    w = rng.standard_normal(width).astype(np.float32)
    wt = torch.from_numpy(w).cuda()
    for m in MS:
        x = _rows(rng, m, width, edge=True)
        xt = torch.from_numpy(x).cuda()
        ck.add("rms_norm.fp32_in", tag, m, _diff(_u16(rows.rms_norm(xt, wt, EPS, torch.bfloat16)),
               rr.rms_norm(x, w, EPS)), x.size)  # fmt: skip
        xb = xt.bfloat16()
        ck.add("rms_norm.bf16_in", tag, m, _diff(_u16(rows.rms_norm(xb, wt, EPS, torch.bfloat16)),
               rr.rms_norm(_u16(xb), w, EPS)), x.size)  # fmt: skip
        res = _rows(rng, m, width)
        rt = torch.from_numpy(res).cuda()
        out = rows.add_rms_norm(xb, rt, wt, EPS, torch.bfloat16)
        want, new = rr.add_rms_norm(_u16(xb), res, w, EPS)
        ck.add("add_rms_norm", tag, m, _diff(_u16(out), want) + _diff(_u32(rt), new.view(np.uint32)),
               2 * x.size)  # fmt: skip
        for splits in (2, 4):
            p = (rng.standard_normal((splits, m, width)) * 4).astype(np.float32)
            res = _rows(rng, m, width)
            rt = torch.from_numpy(res).cuda()
            out = rows.sum_add_rms_norm(
                torch.from_numpy(p).cuda(), None, rt, wt, EPS, torch.bfloat16
            )
            _, new, normed = rr.sum_add_rms_norm(p, None, res, w, EPS)
            ck.add(f"sum_add_rms_norm.s{splits}", tag, m,
                   _diff(_u16(out), normed) + _diff(_u32(rt), new.view(np.uint32)), 2 * x.size)  # fmt: skip


def check_heads(ck: Check, rng, heads: int, kv: int, d: int, tag: str):
    import torch

    from samebits.kernels.replay import rows as rr
    from samebits.kernels.triton import rows
    from samebits.model.rope_tables import rope_tables

    cos, sin = rope_tables(d, 500000.0, None, 4096)
    cos_t, sin_t = cos.cuda(), sin.cuda()
    w = rng.standard_normal(d).astype(np.float32)
    for m in MS:
        x = (
            torch.from_numpy(_rows(rng, m, heads * d, edge=True))
            .cuda()
            .bfloat16()
            .view(m, heads, d)
        )
        xb = _u16(x).reshape(m, heads, d)
        y = x.clone()
        rows.head_rms_norm(y, torch.from_numpy(w).cuda(), EPS)
        ck.add("head_rms_norm", tag, m, _diff(_u16(y).reshape(xb.shape), rr.head_rms_norm(xb, w, EPS)),
               x.numel())  # fmt: skip
        pos = rng.integers(0, 4096, m)
        pt = torch.from_numpy(pos).cuda()
        y = x.clone()
        rows.rope(y, pt, cos_t, sin_t)
        ck.add("rope", tag, m, _diff(_u16(y).reshape(xb.shape), rr.rope(xb, pos, cos.numpy(), sin.numpy())),
               x.numel())  # fmt: skip
        qkv = torch.from_numpy(_rows(rng, m, (heads + 2 * kv) * d)).cuda().bfloat16()
        slots = torch.arange(m, device="cuda", dtype=torch.int64) * 3 + 1
        kc = torch.zeros((3 * m + 2, kv, d), device="cuda", dtype=torch.bfloat16)
        vc = torch.zeros_like(kc)
        q = rows.qkv_rope_store(qkv, pt, slots, cos_t, sin_t, kc, vc, heads)
        wq, wk, wv = rr.qkv_rope_store(_u16(qkv), pos, cos.numpy(), sin.numpy(), heads, kv)
        s = slots.cpu().numpy()
        mism = _diff(_u16(q).reshape(wq.shape), wq)
        mism += _diff(_u16(kc[s]).reshape(wk.shape), wk) + _diff(_u16(vc[s]).reshape(wv.shape), wv)
        ck.add("qkv_rope_store", tag, m, mism, qkv.numel())


def check_gated(ck: Check, rng, inner: int, tag: str):
    import torch

    from samebits.kernels.replay import rows as rr
    from samebits.kernels.triton import rows

    for m in MS:
        gu = torch.from_numpy(_rows(rng, m, 2 * inner, edge=True) * 4).cuda().bfloat16()
        bits = _u16(gu)
        for name, launch, ref in (("silu_mul", rows.silu_mul, rr.silu_mul),
                                  ("gelu_mul", rows.gelu_mul, rr.gelu_mul)):  # fmt: skip
            out = launch(gu)
            ck.add(name, tag, m, _diff(_u16(out), ref(bits)), out.numel())


def check_moe(ck: Check, rng):
    import torch

    from samebits.kernels import moe
    from samebits.kernels.replay import moe as rm
    from samebits.kernels.triton import moe_grouped as mg

    for experts, k, h in ((8, 2, 4096), (128, 8, 256), (60, 4, 256)):
        for m in MS:
            lg = (rng.standard_normal((m, experts)) * 4).astype(np.float32)
            ids, w = moe.route(torch.from_numpy(lg).cuda(), k, True)
            rid, rw = rm.route(lg, k, True)
            mism = _diff(ids.cpu().numpy(), rid) + _diff(_u32(w), rw.view(np.uint32))
            ck.add("moe_route", f"e{experts}.k{k}", m, mism, 2 * m * k)
            o = torch.from_numpy(_rows(rng, m * k, h)).cuda().bfloat16().view(m, k, h)
            y = mg.combine(o, w, torch.bfloat16)
            want = rm.combine(_u16(o).reshape(m, k, h), rw)
            ck.add("moe_combine", f"k{k}.h{h}", m, _diff(_u16(y).reshape(want.shape), want), m * h)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    ck = Check()
    t0 = time.time()
    for width, tag in ((4096, "8b.hidden"), (256, "tiny.hidden"), (896, "qwen2.hidden")):
        check_rms(ck, rng, width, tag)
    for heads, kv, d, tag in ((32, 8, 128, "8b.h32kv8d128"), (4, 2, 64, "tiny.h4kv2d64"),
                              (4, 2, 16, "h4kv2d16")):  # fmt: skip
        check_heads(ck, rng, heads, kv, d, tag)
    for inner, tag in ((14336, "8b.inter"), (768, "tiny.inter")):
        check_gated(ck, rng, inner, tag)
    check_moe(ck, rng)
    bad = [r for r in ck.results if r["replayed"] and r["mismatches"] != 0]
    result = dict(results=ck.results, replayed_mismatching=len(bad),
                  wall_s=time.time() - t0)  # fmt: skip
    Path(args.out).write_text(json.dumps(result, indent=1))
    print(f"{len(bad)} replayed (kernel, shape, M) cases mismatch; {time.time() - t0:.1f} s")
    return 0 if not bad else 1


if __name__ == "__main__":
    sys.exit(main())
