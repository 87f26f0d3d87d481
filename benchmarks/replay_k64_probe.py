"""Why the one-step (K = 64) linears differ from their CPU replay on two MMA input classes
(issue 27; RESULTS.md 2026-12-02: qkv 128x64 with bias in `cancel`, lm_head 320x64 in
`subnormal_out`).

Usage (H200, repo root): ``PYTHONPATH=$PWD/src python benchmarks/replay_k64_probe.py --out DIR``.

For each shape and every MMA input class of `mma_cases`, at M = 130, every launch of the
table: the GPU output bits, the GPU fp32 partial chains (`split_partials`, no bias) and, for
the biased shape, the output in fp32 (no cast), each against the replay; then the same with the
plan's one step of 64 replaced by two steps of 32 (the candidate fix: a range of two or more
chained `tl.dot` leaves no zero accumulator for Triton to fold a bias into). Writes
``k64_probe.json`` (mismatch counts) and ``k64_cases.npz`` (inputs and bits of the failing
cells, for offline analysis); the compiled PTX of the linear kernels goes to ``ptx/``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

SHAPES = [("qkv", 128, 64, True), ("lm_head", 320, 64, False), ("qkv", 128, 64, False)]


def _bits(t) -> np.ndarray:
    import torch

    view = {torch.bfloat16: torch.int16, torch.float32: torch.int32}[t.dtype]
    out = t.cpu().contiguous().view(view).numpy()
    return out.view(np.uint16 if view == torch.int16 else np.uint32)


def _cell(plan, role, x, w, bias, arrays: dict, tag: str) -> dict:
    import torch

    from samebits.kernels.replay import ReplayLinear
    from samebits.kernels.triton.launches import table_launches
    from samebits.kernels.triton.linear import linear, split_partials

    out_dtype = torch.float32 if role == "lm_head" else torch.bfloat16
    xt = torch.from_numpy(x.view(np.int16)).cuda().view(torch.bfloat16)
    wt = torch.from_numpy(w.view(np.int16)).cuda().view(torch.bfloat16)
    bt = None if bias is None else torch.from_numpy(bias).cuda()
    rep = ReplayLinear(w, bias, plan, str(out_dtype).removeprefix("torch."))
    rep32 = ReplayLinear(w, bias, plan, "float32")
    want, want32, parts = rep(x), rep32(x), rep.partials(x)
    res: dict = {}
    for launch in table_launches(plan):
        key = f"{launch.kind} {launch.block_m}x{launch.block_n} w{launch.num_warps} s{launch.num_stages}"
        y = _bits(linear(xt, wt, bt, plan, out_dtype, launch=launch))
        y32 = _bits(linear(xt, wt, bt, plan, torch.float32, launch=launch))
        res[key] = {"out": int((y != want).sum()), "out_fp32": int((y32 != want32).sum())}
        arrays[f"{tag}|{key}|out"] = y
        arrays[f"{tag}|{key}|out32"] = y32
    ptr = [lc for lc in table_launches(plan) if lc.kind != "tma"][0]
    gp = _bits(split_partials(xt, wt, plan, ptr))
    res["partials"] = int((gp != parts).sum())
    arrays.update({f"{tag}|x": x, f"{tag}|w": w, f"{tag}|want": want, f"{tag}|want32": want32,
                   f"{tag}|parts": parts, f"{tag}|gpu_parts": gp})  # fmt: skip
    if bias is not None:
        arrays[f"{tag}|bias"] = bias
    return res


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cache = tempfile.mkdtemp(prefix="tcache-")
    os.environ["TRITON_CACHE_DIR"] = cache
    from samebits.kernels.cpu import mma_cases
    from samebits.kernels.splitplan import SplitPlan, split_plan

    report: dict = {}
    arrays: dict = {}
    for role, n, k, has_bias in SHAPES:
        for variant in ("plan", "bk32"):
            plan = split_plan(n, k, role)
            if variant == "bk32":
                plan = SplitPlan(n=n, k=k, splits=1, block_k=32, range_k=k)
            for i, kind in enumerate(sorted(mma_cases.KINDS)):
                x, w, _ = mma_cases.make_case(kind, 130, n, k, np.random.default_rng([n, k, i]))
                bias = None
                if has_bias:
                    bias = np.random.default_rng(i).standard_normal(n).astype(np.float32)
                tag = f"{role}{n}x{k}{'b' if has_bias else ''}|{variant}|{kind}"
                report[tag] = _cell(plan, role, x, w, bias, arrays, tag)
                bad = {
                    kk: v for kk, v in report[tag].items() if v and v != {"out": 0, "out_fp32": 0}
                }
                print(tag, "plan", plan, "mismatching:", bad, flush=True)
    (out / "k64_probe.json").write_text(json.dumps(report, indent=1))
    np.savez_compressed(out / "k64_cases.npz", **arrays)
    ptx = out / "ptx"
    ptx.mkdir(exist_ok=True)
    for p in Path(cache).rglob("*.ptx"):
        if "linear" in p.name or "ordered" in p.name:
            shutil.copy(p, ptx / f"{p.parent.name[:8]}-{p.name}")
    for p in Path(cache).rglob("*.json"):
        if "linear" in p.name:
            shutil.copy(p, ptx / f"{p.parent.name[:8]}-{p.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
