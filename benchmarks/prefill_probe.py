"""Prefill attention variants that compute the shipped kernel's bits with fewer instructions
(issue 25: the prefill is instruction-bound, `prefill_issue_bound.py`).

`interior_prefill_kernel` is `paged_attention_kernel` (a deliberate near-copy; the shipped
kernel keeps no experiment) whose span loop runs a key tile with no mask where the tile is
*interior* for the program: every key of it is at or below every live row's position and at
or above every live row's window start, and at or below the program's last position. There
every ``keep`` and ``active`` of `_attend_tile` is true, so its selects return their first
operand and the update is the same operations on the same values; the tiles still run in key
order (masked tiles before the window's interior, interior tiles, masked tiles after). Dead
rows (past the tile's tokens) compute values no store writes.

    python benchmarks/prefill_probe.py --out $OUT/prefill_probe.json     # GPU: bits + time
    python benchmarks/prefill_probe.py --sass                             # CPU: tile loops

On the GPU: each cell compares the variant's output with the shipped kernel's as int16 views,
then times both (triton.testing.do_bench) beside SDPA flash. `--sass` compiles both for sm_90
on this machine (Triton's bundled ptxas) and counts the instructions of their key-tile loops.
Evidence class: measurement (bits: the comparison in the run).
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

from samebits.kernels.triton._attention_kernel import (  # noqa: E402
    _attend_tile,
    _merge,
    _query_rows,
)
from samebits.kernels.triton._softexp2 import softexp2  # noqa: E402

LENGTHS = (8192, 32768)


@triton.jit
def softexp2_nonpos(x):
    """`softexp2(x)` for x <= 0 or NaN, the same bits with fewer instructions: no upper clamp
    (x <= 0); n rounded by the even constant 1.5 * 2^23 + 64 (the same n, ties to even: the
    constant is even and t stays in [2^23, 2^24)); e * 2^n rounded once as (e * 2^(n + 64),
    exact and normal) * 2^-64, where the bits of t shifted left by 23 are (n + 64) << 23 (the
    low 22 bits of 1.5 * 2^23 are 0)."""
    xc = tl.maximum(x, -151.0)
    t = xc + 12582976.0
    n = t - 12582976.0
    f = xc - n
    p = tl.fma(1.535336188319500e-4, f, 1.339887440266574e-3)
    p = tl.fma(p, f, 9.618437357674640e-3)
    p = tl.fma(p, f, 5.550332471162809e-2)
    p = tl.fma(p, f, 2.402264791363012e-1)
    p = tl.fma(p, f, 6.931472028550421e-1)
    e = tl.fma(p, f, 1.0)
    bits = e.to(tl.int32, bitcast=True) + (t.to(tl.int32, bitcast=True) << 23)
    y = bits.to(tl.float32, bitcast=True) * 5.421010862427522e-20  # 2^-64
    return tl.where(x != x, x, y)


@triton.jit
def _attend_tile_interior(q, k_ptr, v_ptr, bt_row, key0, hk, qk_scale, m_i, l_i, acc,
                          HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                          BLOCK_N: tl.constexpr, LEAN: tl.constexpr = False):  # fmt: skip
    """`_attend_tile` on a tile interior to every live row: no mask, no select (LEAN: p's
    exponential by `softexp2_nonpos`, the same bits)."""
    d = tl.arange(0, D)
    key = key0 + tl.arange(0, BLOCK_N)
    page = tl.load(bt_row + key // PAGE).to(tl.int64)
    kv = ((page * PAGE + key % PAGE) * HKV + hk) * D
    k = tl.load(k_ptr + kv[:, None] + d[None, :])
    v = tl.load(v_ptr + kv[:, None] + d[None, :])
    s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = softexp2(m_i - m_new)
    if LEAN:
        p = softexp2_nonpos(s - m_new[:, None]).to(v.dtype)
    else:
        p = softexp2(s - m_new[:, None]).to(v.dtype)
    ones = tl.full((BLOCK_N, 16), 1.0, v.dtype)
    col0 = tl.arange(0, 16)[None, :] == 0
    row_sum = tl.sum(tl.where(col0, tl.dot(p, ones, input_precision="ieee"), 0.0), axis=1)
    l_i = tl.fma(l_i, alpha, row_sum)
    acc = tl.dot(p, v, acc * alpha[:, None], input_precision="ieee")
    return m_new, l_i, acc


@triton.jit
def _attend_span_interior(q, k_ptr, v_ptr, bt_row, span0, pos, lo, last, inner0, inner1, hk,
                          qk_scale, HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                          BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                          SPAN: tl.constexpr, LEAN: tl.constexpr):  # fmt: skip
    """`_attend_span` with the tiles in [inner0, inner1) unmasked (tiles still in key order)."""
    m_s = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_s = tl.zeros((BLOCK_M,), tl.float32)
    acc_s = tl.zeros((BLOCK_M, D), tl.float32)
    stop = tl.minimum(span0 + SPAN, last + 1)
    a = tl.minimum(tl.maximum(inner0, span0), stop)
    b = tl.maximum(tl.minimum(inner1, stop), a)
    for key0 in range(span0, a, BLOCK_N):
        m_s, l_s, acc_s = _attend_tile(q, k_ptr, v_ptr, bt_row, key0, pos, lo, last, hk, qk_scale,
                                       m_s, l_s, acc_s, HKV, D, PAGE, BLOCK_N)  # fmt: skip
    for key0 in range(a, b, BLOCK_N):
        m_s, l_s, acc_s = _attend_tile_interior(q, k_ptr, v_ptr, bt_row, key0, hk, qk_scale,
                                                m_s, l_s, acc_s, HKV, D, PAGE, BLOCK_N,
                                                LEAN)  # fmt: skip
    for key0 in range(b, stop, BLOCK_N):
        m_s, l_s, acc_s = _attend_tile(q, k_ptr, v_ptr, bt_row, key0, pos, lo, last, hk, qk_scale,
                                       m_s, l_s, acc_s, HKV, D, PAGE, BLOCK_N)  # fmt: skip
    return m_s, l_s, acc_s


@triton.jit(do_not_specialize=["bt_stride", "window"])
def interior_prefill_kernel(q_ptr, k_ptr, v_ptr, o_ptr, pos_ptr, req_ptr, row0_ptr, qend_ptr,
                            bt_ptr, bt_stride, qk_scale, window, HKV: tl.constexpr,
                            GROUP: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                            SPAN: tl.constexpr, LEAN: tl.constexpr = False):  # fmt: skip
    """`paged_attention_kernel` with interior tiles unmasked: tiles in [inner0, inner1) hold
    keys in every live row's lo..pos (inner0: the first tile start >= every lo; inner1: the
    last tile end <= every position + 1)."""
    pid = tl.program_id(0)
    hk = tl.program_id(1)
    req = tl.load(req_ptr + pid)
    r = tl.arange(0, BLOCK_M)
    tok = tl.load(row0_ptr + pid) + r // GROUP
    live = (r < (BLOCK_M // GROUP) * GROUP) & (tok < tl.load(qend_ptr + req))
    pos = tl.load(pos_ptr + tok, mask=live, other=-1)
    lo = tl.maximum(pos - window + 1, 0)
    rows, q = _query_rows(q_ptr, tok, live, hk, r, HKV, GROUP, D)
    last = tl.max(pos, axis=0)
    first = tl.maximum(tl.min(tl.where(live, pos, last), axis=0), 0)
    lo_max = tl.max(tl.where(live, lo, 0), axis=0)
    inner0 = (lo_max + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    inner1 = (first + 1) // BLOCK_N * BLOCK_N
    bt_row = bt_ptr + req.to(tl.int64) * bt_stride
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for span0 in range(0, last + 1, SPAN):
        m_s, l_s, acc_s = _attend_span_interior(
            q, k_ptr, v_ptr, bt_row, span0, pos, lo, last, inner0, inner1, hk, qk_scale, HKV, D,
            PAGE, BLOCK_M, BLOCK_N, SPAN, LEAN)  # fmt: skip
        m_i, l_i, acc = _merge(m_i, l_i, acc, m_s, l_s, acc_s, (span0 <= pos) & (span0 + SPAN > lo))
    out = tl.math.div_rn(acc, l_i[:, None])
    d = tl.arange(0, D)
    tl.store(o_ptr + rows[:, None] + d[None, :], out.to(o_ptr.dtype.element_ty), mask=live[:, None])


# (name, kernel: "shipped" or "interior", tile height, constexprs, launch options); every
# variant computes the shipped kernel's bits (tile height and launch options change no bit)
VARIANTS = (
    ("shipped", "shipped", 64, {}, {}),
    ("shipped_bm128_w8", "shipped", 128, {}, {"num_warps": 8}),
    ("interior", "interior", 64, {}, {}),
    ("lean", "interior", 64, {"LEAN": True}, {}),
    ("lean_s2", "interior", 64, {"LEAN": True}, {"num_stages": 2}),
    ("lean_s4", "interior", 64, {"LEAN": True}, {"num_stages": 4}),
    ("lean_w8", "interior", 64, {"LEAN": True}, {"num_warps": 8}),
    ("lean_bm128_w8", "interior", 128, {"LEAN": True}, {"num_warps": 8}),
    ("lean_s2_r168", "interior", 64, {"LEAN": True}, {"num_stages": 2, "maxnreg": 168}),
)


def launch_interior(q, k_cache, v_cache, meta, scale: float, window: int = 0,
                    consts: dict | None = None, options: dict | None = None):  # fmt: skip
    """The variant at the plan's launch of `attention.paged_attention` (spans in sequence;
    `window` 0: full attention), with extra constexprs and launch options."""
    import torch

    from samebits.kernels.triton import attention as A

    out = torch.empty_like(q)
    hkv, d = k_cache.shape[1], k_cache.shape[2]
    launch = {"num_warps": meta.num_warps, **A._cap(A.register_cap(meta.block_m, d)),
              **(options or {})}  # fmt: skip
    interior_prefill_kernel[(meta.num_programs, hkv)](
        q, k_cache, v_cache, out, meta.positions, meta.prog_req, meta.prog_row0, meta.query_end,
        meta.block_tables, meta.block_tables.shape[1], scale * A.LOG2E,
        window or A.FULL_WINDOW, HKV=hkv,
        GROUP=meta.group, D=d, PAGE=meta.block_size, BLOCK_M=meta.block_m, BLOCK_N=A.KEY_BLOCK,
        SPAN=meta.span, enable_fp_fusion=A.FP_FUSION, **(consts or {}), **launch)  # fmt: skip
    return out


def _shipped_with(options: dict, q, kv, meta, scale: float, window: int):
    """The shipped launch with an experiment's stages / register cap."""
    from samebits.kernels.triton import attention as A

    saved = A.ATTENTION_STAGES, A.ATTENTION_MAXNREG
    A.ATTENTION_STAGES, A.ATTENTION_MAXNREG = options.get("num_stages"), options.get("maxnreg")
    try:
        return A.paged_attention(q, kv.k_cache, kv.v_cache, meta, scale, window=window)
    finally:
        A.ATTENTION_STAGES, A.ATTENTION_MAXNREG = saved


def _runner(variant, q, kv, metas, scale, window):
    """A no-argument call of one variant on the cell's inputs."""
    _, kernel, block_m, consts, options = variant
    meta = metas(block_m, options.get("num_warps", 4))
    if kernel == "shipped":
        return lambda: _shipped_with(options, q, kv, meta, scale, window)
    return lambda: launch_interior(q, kv.k_cache, kv.v_cache, meta, scale, window, consts, options)


def cell(length: int, window: int, start: int, variants=VARIANTS) -> dict:
    """Queries start..length-1 of one prompt of `length` keys (start > 0: a chunk after cached
    keys): each variant's bits against the shipped launch, then its time beside SDPA flash
    (start 0, no window)."""
    import numpy as np
    import torch
    from gpu_ops import HEAD_DIM, NUM_HEADS, NUM_KV_HEADS, make_paged_kv, randn, sdpa_reference

    from samebits.kernels.triton.attention import attention_metadata

    kv = make_paged_kv(1, length, seed=length)
    q = randn((length - start, NUM_HEADS, HEAD_DIM), kv.k_cache.dtype, seed=3)
    scale = HEAD_DIM**-0.5

    def metas(block_m: int, num_warps: int = 4):
        return attention_metadata(np.arange(start, length), np.array([0, length - start]),
                                  kv.tables, 16, NUM_HEADS // NUM_KV_HEADS, "cuda",
                                  block_m=block_m, num_warps=num_warps)  # fmt: skip

    runs = {v[0]: _runner(v, q, kv, metas, scale, window) for v in variants}
    ref = runs["shipped"]().view(torch.int16)
    row: dict = {"length": length, "window": window, "start": start, "bits_equal": {}, "ms": {}}
    for name, run in runs.items():
        try:
            row["bits_equal"][name] = bool(torch.equal(ref, run().view(torch.int16)))
            row["ms"][name] = triton.testing.do_bench(run)
        except Exception as exc:  # a launch that does not compile or fit: recorded, run goes on
            row["ms"][name] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
    if start == 0 and not window:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        qs = q.transpose(0, 1).unsqueeze(0).contiguous()
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            sdpa, row["sdpa_kind"] = sdpa_reference(qs, kv.k_ref, kv.v_ref, True)
            row["ms"]["sdpa"] = triton.testing.do_bench(sdpa)
    return row


def tile_loops(fn, signature: dict, consts: dict) -> list[int]:
    """Instruction counts of the innermost loops holding HGMMA of `fn` compiled for sm_90."""
    from prefill_issue_bound import WARPS, loops_with_mma, sass_of

    return [len(ops) for ops in loops_with_mma(sass_of(fn, signature, consts, WARPS))]


def sass_report() -> dict:
    from prefill_issue_bound import SIGNATURE, prefill_consts

    from samebits.kernels.triton._attention_kernel import paged_attention_kernel

    consts = prefill_consts()
    return {"shipped": tile_loops(paged_attention_kernel, SIGNATURE, consts),
            "interior": tile_loops(interior_prefill_kernel, SIGNATURE, consts),
            "interior_lean": tile_loops(interior_prefill_kernel, SIGNATURE,
                                        {**consts, "LEAN": True})}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sass", action="store_true", help="CPU: key-tile loop sizes only")
    p.add_argument("--out", default="prefill_probe.json")
    a = p.parse_args()
    if a.sass:
        doc: dict = {"tile_loop_instructions": sass_report()}
    else:
        from gpu_ops import machine_info

        small = [v for v in VARIANTS if v[0] in ("shipped", "interior", "lean")]
        cells = [cell(n, 0, 0) for n in LENGTHS]
        cells += [cell(8192, 4096, 0, small), cell(8192, 0, 6000, small)]
        doc = {"machine": machine_info(), "rows": cells}
    print(json.dumps(doc, indent=1))
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
