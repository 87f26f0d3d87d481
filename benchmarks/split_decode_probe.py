"""Where a split-KV decode step's time goes (issue 25): the span kernel and the ordered merge
timed apart, and launch variants of each that compute the same bits (checked here, as int32
views of the output, against the shipped launch).

Merge variants (`merge_slices_kernel`: the shipped `merge_spans_kernel` with two launch
knobs, a head-dim slice per program and the span loop's pipeline stages; a deliberate
near-copy, so the shipped kernel keeps no knob it does not use) fold the same stored span
states in the same span order with the same formula (`_attention_kernel._merge`); a slice's
rows recompute m and l (the same operations on the same inputs). The span kernel runs at the
plan's launch (warps / stages / register-cap variants changed nothing: RESULTS, run 1).

    python benchmarks/split_decode_probe.py --out $OUT/split_decode_probe.json

Evidence class: measurement (bits: the comparison in this run).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gpu_ops import (  # noqa: E402
    HEAD_DIM,
    NUM_HEADS,
    NUM_KV_HEADS,
    bench_graph,
    machine_info,
    make_paged_kv,
    randn,
)

from samebits.kernels.triton._attention_kernel import _merge, _state_offsets  # noqa: E402

HBM_GBPS = 4800.0
CELLS = [(1, 4096), (1, 8192), (1, 16384), (1, 32768), (1, 131072),
         (16, 4096), (16, 8192), (16, 16384), (16, 32768)]  # fmt: skip
# (head-dim slice, warps, pipeline stages of the span loop; 1: not pipelined)
MERGE_VARIANTS = [(128, 4, 1), (128, 4, 3), (128, 4, 4), (128, 4, 6), (128, 4, 8), (128, 8, 4),
                  (64, 4, 3), (32, 1, 3), (32, 2, 3), (64, 2, 3)]  # fmt: skip


@triton.jit(do_not_specialize=["max_spans", "window"])
def merge_slices_kernel(o_ptr, ms_ptr, ls_ptr, accs_ptr, pos_ptr, max_spans, window,
                        HKV: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, SPAN: tl.constexpr,
                        STAGES: tl.constexpr):  # fmt: skip
    """`merge_spans_kernel` over the head-dim slice program_id(2) * BLOCK_D of each row, its
    span loop a `tl.range` of STAGES pipeline stages (1: not pipelined)."""
    req = tl.program_id(0)
    hk = tl.program_id(1)
    r = tl.arange(0, BLOCK_M)
    live = r < GROUP
    tok = tl.zeros((BLOCK_M,), tl.int32) + req
    pos = tl.load(pos_ptr + tok, mask=live, other=-1)
    lo = tl.maximum(pos - window + 1, 0)
    d = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    for span in tl.range(0, tl.max(pos, axis=0) // SPAN + 1, num_stages=STAGES):
        at = _state_offsets(tok * max_spans + span, hk, r, HKV, GROUP)
        m_s = tl.load(ms_ptr + at, mask=live, other=float("-inf"))
        l_s = tl.load(ls_ptr + at, mask=live, other=0.0)
        acc_s = tl.load(accs_ptr + at[:, None] * D + d[None, :], mask=live[:, None], other=0.0)
        m_i, l_i, acc = _merge(m_i, l_i, acc, m_s, l_s, acc_s, live & (span * SPAN + SPAN > lo))
    out = tl.math.div_rn(acc, l_i[:, None])
    rows = _state_offsets(tok, hk, r, HKV, GROUP) * D
    tl.store(o_ptr + rows[:, None] + d[None, :], out.to(o_ptr.dtype.element_ty), mask=live[:, None])


def bits(t):
    import torch

    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def cell(batch: int, context: int) -> dict:
    import torch

    from samebits.kernels.triton import attention as A
    from samebits.kernels.triton._attention_kernel import merge_spans_kernel, split_span_kernel

    kv = make_paged_kv(batch, context, seed=context + batch)
    q = randn((batch, NUM_HEADS, HEAD_DIM), kv.k_cache.dtype, seed=7)
    import numpy as np

    meta = A.attention_metadata(np.full(batch, context - 1), np.arange(batch + 1), kv.tables, 16,
                                NUM_HEADS // NUM_KV_HEADS, "cuda")  # fmt: skip
    splits = A.decode_splits(meta, NUM_KV_HEADS)
    scale = HEAD_DIM**-0.5 * A.LOG2E
    r, heads, d, hkv = batch, NUM_HEADS, HEAD_DIM, NUM_KV_HEADS
    max_spans = meta.max_position // meta.span + 1
    m_s = torch.empty((r * max_spans * heads,), dtype=torch.float32, device="cuda")
    l_s = torch.empty_like(m_s)
    acc_s = torch.empty((r * max_spans * heads * d,), dtype=torch.float32, device="cuda")
    facts = dict(HKV=hkv, GROUP=meta.group, D=d, BLOCK_M=meta.block_m, SPAN=meta.span)
    win = A.FULL_WINDOW

    launch = dict(num_warps=meta.num_warps, enable_fp_fusion=A.FP_FUSION, **facts)

    def split():  # the plan's own launch (`attention._split_decode`)
        split_span_kernel[(r, splits, hkv)](
            q, kv.k_cache, kv.v_cache, m_s, l_s, acc_s, meta.positions, meta.block_tables,
            meta.block_tables.shape[1], max_spans, scale, win, PAGE=16, BLOCK_N=A.KEY_BLOCK,
            maxnreg=A.register_cap(meta.block_m, d), **launch)  # fmt: skip

    def merge(out):  # the shipped merge, as the plan launches it
        merge_spans_kernel[(r, hkv)](out, m_s, l_s, acc_s, meta.positions, max_spans, win,
                                     **launch)  # fmt: skip

    def merge_sliced(out, block_d, warps=4, stages=1):
        merge_slices_kernel[(r, hkv, d // block_d)](
            out, m_s, l_s, acc_s, meta.positions, max_spans, win, BLOCK_D=block_d, STAGES=stages,
            num_warps=warps, enable_fp_fusion=A.FP_FUSION, **facts)  # fmt: skip

    row = {"batch": batch, "context": context, "splits": splits, "spans": max_spans}
    if not splits:
        return row
    split()
    ref = torch.empty_like(q)
    merge(ref)
    gb = 2 * batch * context * hkv * d * 2 / 1e9
    t = {"whole": bench_graph(lambda: A.paged_attention(q, kv.k_cache, kv.v_cache, meta,
                                                        HEAD_DIM**-0.5), 30)}  # fmt: skip
    t["split"] = bench_graph(split, 30)
    split()
    t["merge"] = bench_graph(lambda: merge(torch.empty_like(q)), 30)
    eq = {}
    for bd, warps, stages in MERGE_VARIANTS:
        name = f"merge_d{bd}_w{warps}_s{stages}"
        out = torch.empty_like(q)
        merge_sliced(out, bd, warps, stages)
        eq[name] = bool(torch.equal(bits(out), bits(ref)))
        t[name] = bench_graph(
            lambda v=(bd, warps, stages): merge_sliced(torch.empty_like(q), *v), 30
        )
    row.update(gb=gb, us={k: round(v * 1e3, 2) for k, v in t.items()}, bits_equal=eq,
               pct_hbm_whole=round(100 * gb / (t["whole"] / 1e3) / HBM_GBPS, 1))  # fmt: skip
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    rows = []
    for batch, context in CELLS:
        rows.append(cell(batch, context))
        print(json.dumps(rows[-1]), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"machine": machine_info(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
