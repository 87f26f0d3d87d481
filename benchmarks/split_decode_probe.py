"""Where a split-KV decode step's time goes (issue 25): the span kernel and the ordered merge
timed apart, and launch variants of each that compute the same bits (checked here, as int32
views of the output, against the shipped launch).

Merge variants (`merge_slices_kernel`: the shipped `merge_spans_kernel` with launch knobs:
a head-dim slice per program, the span loop's pipeline stages, spans unrolled per loop trip
and the tile height; a deliberate near-copy, so the shipped kernel keeps no knob it does not
use) fold the same stored span states in the same span order with the same formula
(`_attention_kernel._merge`); a slice's rows recompute m and l (the same operations on the
same inputs); an unrolled trip's spans past the last are masked out of the fold (`take`
false: the state is kept by a select, not recomputed). Span-kernel launch variants
(`SPLIT_VARIANTS`: warps, stages, register cap; run 1 tried 2 / 4 stages, 8 warps, no cap;
Triton 3.6 gives the page-indirect K/V loads a second buffer only from 5 stages, a third
from 8: compiled for sm_90 on a CPU, the TTGIR's K/V `local_alloc`s are 1x64x128 below 5)
store states the shipped merge folds into the shipped output's bits (checked), timed alone;
they include the grid shipped until 2026-12-07 (requests first) and contiguous runs of spans
per program in one tile sequence (`split_runs_kernel`), at several spans per program.
`--split-only` skips the merge variants, `--merge-only` the span-kernel variants. `--floor`
times only floors of the span launch (`floor_kernel`: the same grid and paged K / V reads with
no softmax, or none of the tile arithmetic), and with parts smaller than a span (more programs
than the definition has), to tell the launch shape's limit from the kernel's; and the step's
two launches with and without programmatic dependent launch (`pdl_pair`: the merge starts
while the span kernel runs and waits for its writes), bits checked; the floors again with each
page's [16, 128] box of a KV head read by one TMA copy (`floor_tma_kernel`: no per-thread
addresses), NHD and HND pages; and the launch shapes of `split_probe_shapes` (head-dim slices,
scores first, HND pages, TMA page boxes), bits checked, each alone and as the step with the
merge.

    python benchmarks/split_decode_probe.py --out $OUT/split_decode_probe.json
    python benchmarks/split_probe_dryrun.py 1 1536   # the --floor cell on the CPU, first

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

import split_probe_shapes as S  # noqa: E402
from gpu_ops import (  # noqa: E402
    HEAD_DIM,
    NUM_HEADS,
    NUM_KV_HEADS,
    bench_graph,
    hbm_gbps,
    machine_info,
    make_paged_kv,
    randn,
)
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: E402

from samebits.kernels.triton._attention_kernel import (  # noqa: E402
    _attend_tile,
    _attend_tile_interior,
    _decode_rows,
    _merge,
    _split_spans,
    _state_offsets,
    _store_state,
)
from samebits.kernels.triton._softexp2 import ex2q  # noqa: E402

CELLS = [(1, 4096), (1, 8192), (1, 16384), (1, 32768), (1, 131072),
         (16, 4096), (16, 8192), (16, 16384), (16, 32768)]  # fmt: skip
# (head-dim slice, warps, pipeline stages of the span loop (1: not pipelined), spans per loop
# trip, tile height (0: the plan's))
MERGE_VARIANTS = [(128, 4, 1, 1, 0), (128, 4, 3, 1, 0), (128, 4, 4, 1, 0), (128, 4, 8, 1, 0),
                  (128, 4, 4, 1, 4), (128, 4, 8, 1, 4), (128, 4, 1, 4, 0), (128, 4, 1, 8, 0),
                  (128, 4, 2, 4, 0), (128, 4, 3, 4, 4), (128, 4, 1, 8, 4), (128, 2, 2, 8, 4),
                  (64, 2, 3, 4, 4), (32, 1, 3, 4, 4), (128, 1, 4, 1, 4), (128, 2, 4, 1, 4),
                  (128, 8, 4, 1, 4), (128, 2, 6, 1, 4), (64, 1, 4, 1, 4), (128, 4, 1, 4, 4),
                  (128, 4, 2, 4, 4), (128, 4, 4, 4, 4), (128, 4, 3, 2, 4), (128, 4, 3, 8, 4),
                  (128, 2, 3, 4, 4), (128, 2, 3, 8, 4)]  # fmt: skip
# m and l as 2-D tiles: (warps, pipeline stages, tile height)
FLAT_VARIANTS = [(4, 4, 4), (4, 6, 4), (2, 4, 4), (8, 4, 4), (4, 1, 4)]
# two-phase merge: (warps, pipeline stages of the fold, spans per weight chunk, tile height)
# (tile height 16 and 1 warp fail Triton 3.6's TritonGPUOptimizeThreadLocality pass)
# the span kernel's launch: (kernel, spans per program (0: the plan's programs per request),
# warps (0: the plan's), pipeline stages (0: the plan's `attention.split_options`), register
# cap (-1: the plan's, none since session 25; 0: none; else that cap)); "heads": the shipped
# `split_span_kernel` (grid: KV heads first), "requests": its grid until 2026-12-07
# (`split_requests_first_kernel`), "runs": contiguous runs of spans in one tile sequence
# (`split_runs_kernel`, grid: requests first). Earlier runs (2026-12-07) tried stages 3 / 5 /
# 6 / 8, 8 warps, no cap, and 2 warps under the cap of 128 (1.4x slower).
SPLIT_VARIANTS = [("heads", 0, 4, 0, 128), ("heads", 0, 4, 0, 0), ("requests", 0, 0, 0, -1),
                  ("heads", 0, 0, 3, -1), ("heads", 0, 0, 4, -1), ("heads", 0, 0, 5, -1),
                  ("heads", 0, 1, 3, -1), ("heads", 0, 1, 5, -1), ("heads", 1, 0, 0, -1),
                  ("heads", 2, 0, 0, -1), ("runs", 2, 0, 0, -1), ("runs", 4, 0, 0, -1)]  # fmt: skip
# floors of the span launch (`floor_kernel`, `--floor`): (keys a program, MMAs (else a sum
# of the tiles), warps, pipeline stages, an HND copy of the caches); a part below the span (512)
# is more programs than the span definition allows, the parallelism it forgoes
FLOOR_VARIANTS = [(512, False, 2, 3, False), (512, False, 2, 5, False), (512, False, 4, 3, False),
                  (512, False, 8, 3, False), (256, False, 2, 3, False), (128, False, 2, 3, False),
                  (512, True, 2, 3, False), (512, True, 2, 5, False), (512, True, 2, 9, False),
                  (512, False, 2, 3, True), (512, False, 2, 5, True), (512, True, 2, 3, True),
                  (512, True, 2, 5, True)]  # fmt: skip
# the same floors with TMA box loads (`floor_tma_kernel`): (keys a program, MMAs, warps,
# pipeline stages, HND pages)
TMA_FLOOR_VARIANTS = [(512, False, 2, 3, False), (512, False, 4, 3, False), (512, False, 4, 4, False),
                      (512, True, 4, 3, False), (512, False, 4, 3, True), (512, True, 4, 3, True),
                      (256, False, 4, 3, False)]  # fmt: skip
# the launch shapes of `split_probe_shapes` (`--floor`) at these pipeline stages (0: the plan's)
SHAPE_STAGES = (0, 3)
TWO_PHASE_VARIANTS = [(4, 3, 64, 4), (4, 4, 64, 4), (4, 6, 64, 4), (4, 8, 64, 4), (4, 4, 32, 4),
                      (2, 4, 64, 4), (2, 6, 64, 4)]  # fmt: skip


@triton.jit
def _merge_rows(pos_ptr, window, GROUP: tl.constexpr, BLOCK_M: tl.constexpr):
    """The merge program's rows, as `merge_spans_kernel` sets them up: (KV head, lanes, live
    lanes, token, positions, window starts)."""
    hk = tl.program_id(1)
    r = tl.arange(0, BLOCK_M)
    live = r < GROUP
    tok = tl.zeros((BLOCK_M,), tl.int32) + tl.program_id(0)
    pos = tl.load(pos_ptr + tok, mask=live, other=-1)
    return hk, r, live, tok, pos, tl.maximum(pos - window + 1, 0)


@triton.jit(do_not_specialize=["max_spans", "window"])
def merge_slices_kernel(o_ptr, ms_ptr, ls_ptr, accs_ptr, pos_ptr, max_spans, window,
                        HKV: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr, SPAN: tl.constexpr,
                        STAGES: tl.constexpr, UNROLL: tl.constexpr,
                        PDL: tl.constexpr):  # fmt: skip
    """`merge_spans_kernel` over the head-dim slice program_id(2) * BLOCK_D of each row, its
    span loop a `tl.range` of STAGES pipeline stages (1: not pipelined), UNROLL spans a trip;
    PDL: launched as a programmatic dependent of the span kernel, it waits for that grid's
    writes (`gdc_wait`) before its first state load."""
    hk, r, live, tok, pos, lo = _merge_rows(pos_ptr, window, GROUP, BLOCK_M)
    if PDL:
        gdc_wait()
    d = tl.program_id(2) * BLOCK_D + tl.arange(0, BLOCK_D)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    n = tl.max(pos, axis=0) // SPAN + 1
    for c0 in tl.range(0, n, UNROLL, num_stages=STAGES):
        for u in tl.static_range(UNROLL):
            ok = live & (c0 + u < n)
            at = _state_offsets(tok * max_spans + c0 + u, hk, r, HKV, GROUP)
            m_s = tl.load(ms_ptr + at, mask=ok, other=float("-inf"))
            l_s = tl.load(ls_ptr + at, mask=ok, other=0.0)
            acc_s = tl.load(accs_ptr + at[:, None] * D + d[None, :], mask=ok[:, None], other=0.0)
            take = ok & ((c0 + u) * SPAN + SPAN > lo)
            m_i, l_i, acc = _merge(m_i, l_i, acc, m_s, l_s, acc_s, take)
    out = tl.math.div_rn(acc, l_i[:, None])
    rows = _state_offsets(tok, hk, r, HKV, GROUP) * D
    tl.store(o_ptr + rows[:, None] + d[None, :], out.to(o_ptr.dtype.element_ty), mask=live[:, None])


@triton.jit(do_not_specialize=["max_spans", "window"])
def merge_flat_kernel(o_ptr, ms_ptr, ls_ptr, accs_ptr, pos_ptr, max_spans, window,
                      HKV: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr,
                      BLOCK_M: tl.constexpr, SPAN: tl.constexpr, STAGES: tl.constexpr):  # fmt: skip
    """`merge_spans_kernel` with m and l held as [BLOCK_M, D] tiles (each row's value in every
    column: the same operations on the same inputs, in one layout, no layout conversion)."""
    req = tl.program_id(0)
    hk = tl.program_id(1)
    r = tl.arange(0, BLOCK_M)
    d = tl.arange(0, D)
    live = (r < GROUP)[:, None] & (d < D)[None, :]
    tok = tl.zeros((BLOCK_M,), tl.int32)[:, None] + req + 0 * d[None, :]
    pos = tl.load(pos_ptr + tok, mask=live, other=-1)
    lo = tl.maximum(pos - window + 1, 0)
    m_i = tl.full((BLOCK_M, D), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M, D), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for span in tl.range(0, tl.max(tl.max(pos, axis=1), axis=0) // SPAN + 1, num_stages=STAGES):
        at = _state_offsets(tok * max_spans + span, hk, r[:, None], HKV, GROUP)
        m_s = tl.load(ms_ptr + at, mask=live, other=float("-inf"))
        l_s = tl.load(ls_ptr + at, mask=live, other=0.0)
        acc_s = tl.load(accs_ptr + at * D + d[None, :], mask=live, other=0.0)
        take = live & (span * SPAN + SPAN > lo)
        m_new = tl.maximum(m_i, m_s)
        a = ex2q(tl.where(take, m_i - m_new, 0.0))
        b = ex2q(tl.where(take, m_s - m_new, 0.0))
        l_new = tl.fma(l_i, a, l_s * b)
        acc_new = tl.fma(acc, a, acc_s * b)
        m_i = tl.where(take, m_new, m_i)
        l_i = tl.where(take, l_new, l_i)
        acc = tl.where(take, acc_new, acc)
    out = tl.math.div_rn(acc, l_i)
    rows = _state_offsets(tok, hk, r[:, None], HKV, GROUP) * D
    tl.store(o_ptr + rows + d[None, :], out.to(o_ptr.dtype.element_ty), mask=live)


@triton.jit
def _fresh_at(key0, m_s, l_s, acc_s, SPAN: tl.constexpr):
    """The fresh span state (m -inf, l +0, acc +0: `_attend_span`'s start) where key0 starts
    a span, else the state unchanged."""
    fresh = key0 % SPAN == 0
    m_s = tl.where(fresh, float("-inf"), m_s)
    l_s = tl.where(fresh, 0.0, l_s)
    acc_s = tl.where(fresh, 0.0, acc_s)
    return m_s, l_s, acc_s


@triton.jit
def _store_span_end(ms_ptr, ls_ptr, accs_ptr, key0, last, tok, max_spans, hk, r, live, m_s, l_s,
                    acc_s, HKV: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr,
                    BLOCK_N: tl.constexpr, SPAN: tl.constexpr):  # fmt: skip
    """Store the span state after the span's last tile (key0 + BLOCK_N a span end, or past
    the last key), where `split_span_kernel` stores it."""
    ok = live & (((key0 + BLOCK_N) % SPAN == 0) | (key0 + BLOCK_N > last))
    at = _state_offsets(tok * max_spans + key0 // SPAN, hk, r, HKV, GROUP)
    _store_state(ms_ptr, ls_ptr, accs_ptr, at, ok, m_s, l_s, acc_s, D)


@triton.jit
def _run_step(q, k_ptr, v_ptr, ms_ptr, ls_ptr, accs_ptr, bt_row, key0, pos, lo, last, tok,
              max_spans, hk, r, live, qk_scale, m_s, l_s, acc_s, INTERIOR: tl.constexpr,
              HKV: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
              BLOCK_N: tl.constexpr, SPAN: tl.constexpr):  # fmt: skip
    """Key tile key0 of a run: the fresh state at a span's first tile, the tile's update (the
    unmasked one where INTERIOR), the state stored after a span's last tile."""
    m_s, l_s, acc_s = _fresh_at(key0, m_s, l_s, acc_s, SPAN)
    if INTERIOR:
        m_s, l_s, acc_s = _attend_tile_interior(q, k_ptr, v_ptr, bt_row, key0, hk, qk_scale,
                                                m_s, l_s, acc_s, HKV, D, PAGE, BLOCK_N)  # fmt: skip
    else:
        m_s, l_s, acc_s = _attend_tile(q, k_ptr, v_ptr, bt_row, key0, pos, lo, last, hk, qk_scale,
                                       m_s, l_s, acc_s, HKV, D, PAGE, BLOCK_N)  # fmt: skip
    _store_span_end(ms_ptr, ls_ptr, accs_ptr, key0, last, tok, max_spans, hk, r, live, m_s, l_s,
                    acc_s, HKV, GROUP, D, BLOCK_N, SPAN)  # fmt: skip
    return m_s, l_s, acc_s


@triton.jit(do_not_specialize=["bt_stride", "max_spans", "window"])
def split_runs_kernel(q_ptr, k_ptr, v_ptr, ms_ptr, ls_ptr, accs_ptr, pos_ptr, bt_ptr, bt_stride,
                      max_spans, qk_scale, window, HKV: tl.constexpr, GROUP: tl.constexpr,
                      D: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, SPAN: tl.constexpr):  # fmt: skip
    """`split_span_kernel` with program (r, j, kv head) on the contiguous run of spans
    j * n // S .. (j + 1) * n // S - 1 (n spans, S programs per request), its key tiles in one
    sequence of three loops (masked, interior, masked: the pipeline does not drain at each
    span): each span's state starts fresh at its first tile and is stored after its last, so
    every span's tiles run the same updates, in the same order, from the same fresh state."""
    req = tl.program_id(0)
    hk = tl.program_id(2)
    r, live, tok, pos, lo, q, last, inner0, inner1, bt_row = _decode_rows(
        req, hk, q_ptr, pos_ptr, bt_ptr, bt_stride, window, HKV, GROUP, D, BLOCK_M, BLOCK_N
    )  # fmt: skip
    n = last // SPAN + 1
    j, s = tl.program_id(1), tl.num_programs(1)
    t0 = j * n // s * SPAN
    t1 = tl.minimum((j + 1) * n // s * SPAN, last + 1)
    a = tl.minimum(tl.maximum(inner0, t0), t1)
    b = tl.maximum(tl.minimum(inner1, t1), a)
    m_s = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_s = tl.zeros((BLOCK_M,), tl.float32)
    acc_s = tl.zeros((BLOCK_M, D), tl.float32)
    for key0 in range(t0, a, BLOCK_N):
        m_s, l_s, acc_s = _run_step(q, k_ptr, v_ptr, ms_ptr, ls_ptr, accs_ptr, bt_row, key0, pos,
                                    lo, last, tok, max_spans, hk, r, live, qk_scale, m_s, l_s,
                                    acc_s, False, HKV, GROUP, D, PAGE, BLOCK_N, SPAN)  # fmt: skip
    for key0 in range(a, b, BLOCK_N):
        m_s, l_s, acc_s = _run_step(q, k_ptr, v_ptr, ms_ptr, ls_ptr, accs_ptr, bt_row, key0, pos,
                                    lo, last, tok, max_spans, hk, r, live, qk_scale, m_s, l_s,
                                    acc_s, True, HKV, GROUP, D, PAGE, BLOCK_N, SPAN)  # fmt: skip
    for key0 in range(b, t1, BLOCK_N):
        m_s, l_s, acc_s = _run_step(q, k_ptr, v_ptr, ms_ptr, ls_ptr, accs_ptr, bt_row, key0, pos,
                                    lo, last, tok, max_spans, hk, r, live, qk_scale, m_s, l_s,
                                    acc_s, False, HKV, GROUP, D, PAGE, BLOCK_N, SPAN)  # fmt: skip


@triton.jit(do_not_specialize=["bt_stride", "max_spans", "window"])
def split_requests_first_kernel(q_ptr, k_ptr, v_ptr, ms_ptr, ls_ptr, accs_ptr, pos_ptr, bt_ptr,
                                bt_stride, max_spans, qk_scale, window, HKV: tl.constexpr,
                                GROUP: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                SPAN: tl.constexpr):  # fmt: skip
    """`split_span_kernel` on the grid it had until 2026-12-07, (r, j, kv head): the programs
    in flight read one KV head's 256 bytes of each token row, the other heads' later."""
    _split_spans(tl.program_id(0), tl.program_id(2), q_ptr, k_ptr, v_ptr, ms_ptr, ls_ptr,
                 accs_ptr, pos_ptr, bt_ptr, bt_stride, max_spans, qk_scale, window, HKV, GROUP, D,
                 PAGE, BLOCK_M, BLOCK_N, SPAN)  # fmt: skip


@triton.jit
def _cummax(a, b):
    return tl.maximum(a, b)


@triton.jit
def _span_weights(w_ptr, ms_ptr, base, c0, n, live, lo, carry, WROWS, H: tl.constexpr,
                  SPAN: tl.constexpr, SB: tl.constexpr):  # fmt: skip
    """Spans c0 .. c0 + SB - 1 at once: the running max after each span (max is exact in any
    order) and the fold's two weights a = 2^(m_prev - m), b = 2^(m_s - m), stored at
    w_ptr[at] and w_ptr[WROWS + at]; returns the running max after the chunk."""
    sp = c0 + tl.arange(0, SB)
    at = base[:, None] + sp[None, :] * H
    take = live[:, None] & (sp[None, :] < n) & (sp[None, :] * SPAN + SPAN > lo[:, None])
    prev_take = live[:, None] & (sp[None, :] > c0) & (sp[None, :] * SPAN > lo[:, None])
    prev_take = prev_take & (sp[None, :] - 1 < n)
    ms = tl.load(ms_ptr + at, mask=take, other=float("-inf"))
    ms_prev = tl.load(ms_ptr + at - H, mask=prev_take, other=float("-inf"))
    m_new = tl.maximum(carry[:, None], tl.associative_scan(ms, 1, _cummax))
    m_old = tl.maximum(carry[:, None], tl.associative_scan(ms_prev, 1, _cummax))
    tl.store(w_ptr + at, ex2q(tl.where(take, m_old - m_new, 0.0)), mask=take)
    tl.store(w_ptr + WROWS + at, ex2q(tl.where(take, ms - m_new, 0.0)), mask=take)
    return tl.maximum(carry, tl.max(ms, axis=1))


@triton.jit(do_not_specialize=["max_spans", "window"])
def merge_two_phase_kernel(o_ptr, ms_ptr, ls_ptr, accs_ptr, w_ptr, pos_ptr, max_spans, window,
                           WROWS, HKV: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr,
                           BLOCK_M: tl.constexpr, SPAN: tl.constexpr, SB: tl.constexpr,
                           STAGES: tl.constexpr):  # fmt: skip
    """`merge_spans_kernel`'s fold in two phases: every span's weights (a, b) first, SB spans
    at a time (the exponentials leave the sequential loop), then the ordered fold of l and
    acc with them: l' = fma(l, a, l_s * b), acc' = fma(acc, a, acc_s * b), as `_merge`."""
    hk, r, live, tok, pos, lo = _merge_rows(pos_ptr, window, GROUP, BLOCK_M)
    d = tl.arange(0, D)
    n = tl.max(pos, axis=0) // SPAN + 1
    base = _state_offsets(tok * max_spans, hk, r, HKV, GROUP)
    carry = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    for c0 in range(0, n, SB):
        carry = _span_weights(w_ptr, ms_ptr, base, c0, n, live, lo, carry, WROWS, HKV * GROUP,
                              SPAN, SB)  # fmt: skip
    tl.debug_barrier()
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for span in tl.range(0, n, num_stages=STAGES):
        at = _state_offsets(tok * max_spans + span, hk, r, HKV, GROUP)
        take = live & (span * SPAN + SPAN > lo)
        a = tl.load(w_ptr + at, mask=take, other=0.0)
        b = tl.load(w_ptr + WROWS + at, mask=take, other=0.0)
        l_s = tl.load(ls_ptr + at, mask=take, other=0.0)
        acc_s = tl.load(accs_ptr + at[:, None] * D + d[None, :], mask=take[:, None], other=0.0)
        l_i = tl.where(take, tl.fma(l_i, a, l_s * b), l_i)
        acc = tl.where(take[:, None], tl.fma(acc, a[:, None], acc_s * b[:, None]), acc)
    out = tl.math.div_rn(acc, l_i[:, None])
    rows = _state_offsets(tok, hk, r, HKV, GROUP) * D
    tl.store(o_ptr + rows[:, None] + d[None, :], out.to(o_ptr.dtype.element_ty), mask=live[:, None])


@triton.jit
def _kv_tile(k_ptr, v_ptr, bt_row, key0, stop, hk, HKV: tl.constexpr, D: tl.constexpr,
             PAGE: tl.constexpr, BLOCK_N: tl.constexpr, HND: tl.constexpr):  # fmt: skip
    """The K and V tiles of keys [key0, key0 + BLOCK_N) below `stop`, paged as the plan reads
    them (`split_probe_shapes._paged_rows`: NHD pages, or the HND copy's)."""
    d = tl.arange(0, D)
    key = key0 + tl.arange(0, BLOCK_N)
    kmask = key < stop
    kv = S._paged_rows(bt_row, key, kmask, hk, HKV, D, PAGE, True, HND)
    k = tl.load(k_ptr + kv[:, None] + d[None, :], mask=kmask[:, None], other=0.0)
    v = tl.load(v_ptr + kv[:, None] + d[None, :], mask=kmask[:, None], other=0.0)
    return k, v


@triton.jit
def _floor_program(q_ptr, pos_ptr, bt_ptr, bt_stride, HKV: tl.constexpr, D: tl.constexpr,
                   BLOCK_M: tl.constexpr, PART: tl.constexpr):  # fmt: skip
    """A floor program (kv head, j, request): its keys [start, stop), block-table row, q."""
    hk, j, req = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    start = j * PART
    stop = tl.minimum(start + PART, tl.load(pos_ptr + req) + 1)
    bt_row = bt_ptr + req.to(tl.int64) * bt_stride
    d = tl.arange(0, D)
    q = tl.load(q_ptr + (req * HKV + hk) * BLOCK_M * D + tl.arange(0, BLOCK_M)[:, None] * D + d)
    return hk, start, stop, bt_row, q


@triton.jit
def _floor_use(q, k, v, acc, total, DOTS: tl.constexpr):
    """A floor's use of a K / V tile: the two MMAs without the softmax (DOTS), else a sum."""
    if DOTS:
        s = tl.dot(q, tl.trans(k), input_precision="ieee")
        acc = tl.dot(s.to(v.dtype), v, acc, input_precision="ieee")
    else:
        total += k.to(tl.float32) + v.to(tl.float32)
    return acc, total


@triton.jit
def _floor_sink(sink_ptr, acc, total, HKV: tl.constexpr):
    """Store one value of the program's results, so that no load is dead."""
    pid = (tl.program_id(2) * tl.num_programs(1) + tl.program_id(1)) * HKV + tl.program_id(0)
    tl.store(
        sink_ptr + pid, tl.sum(tl.sum(acc, axis=1), axis=0) + tl.sum(tl.sum(total, axis=1), axis=0)
    )


@triton.jit(do_not_specialize=["bt_stride"])
def floor_kernel(q_ptr, k_ptr, v_ptr, sink_ptr, pos_ptr, bt_ptr, bt_stride,
                 HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, PART: tl.constexpr, DOTS: tl.constexpr,
                 STAGES: tl.constexpr, HND: tl.constexpr):  # fmt: skip
    """A floor, not attention: program (kv head, j, request) reads the K and V tiles of keys
    [j * PART, (j + 1) * PART) of the request, as the span kernel does (same grid, same paged
    addresses), and only sums them (DOTS false: the memory traffic alone) or feeds them to the
    two MMAs of a tile update without the softmax (DOTS true: acc = (q k^T as bf16) v + acc).
    HND: from a copy of the caches whose pages are [HKV, PAGE, D] (FlashInfer's "HND"; the
    plan's are [PAGE, HKV, D]): a page's 16 keys of one head are 4 KB in one piece, not 16
    pieces of 256 bytes. One value a program is stored, so no load is dead."""
    hk, start, stop, bt_row, q = _floor_program(q_ptr, pos_ptr, bt_ptr, bt_stride, HKV, D,
                                                BLOCK_M, PART)  # fmt: skip
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    total = tl.zeros((BLOCK_N, D), tl.float32)
    for key0 in tl.range(start, stop, BLOCK_N, num_stages=STAGES):
        k, v = _kv_tile(k_ptr, v_ptr, bt_row, key0, stop, hk, HKV, D, PAGE, BLOCK_N, HND)
        acc, total = _floor_use(q, k, v, acc, total, DOTS)
    _floor_sink(sink_ptr, acc, total, HKV)


@triton.jit(do_not_specialize=["bt_stride"])
def floor_tma_kernel(q_ptr, k_desc, v_desc, sink_ptr, pos_ptr, bt_ptr, bt_stride,
                     HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                     BLOCK_M: tl.constexpr, PART: tl.constexpr, DOTS: tl.constexpr,
                     STAGES: tl.constexpr, HND: tl.constexpr):  # fmt: skip
    """`floor_kernel` with each page's [PAGE, D] box of one KV head read by the tensor-memory
    accelerator (one TMA copy a box, no per-thread addresses): `k_desc` / `v_desc` describe
    the cache as rows of HKV * D (NHD pages: a box of 16 rows 2 KB apart) or, HND, as rows of
    D (a box of 16 contiguous rows); a loop trip is one page (16 keys), the MMAs of DOTS on
    [BLOCK_M, 16] scores. A request's partial last page is read whole (15 keys at most)."""
    hk, start, stop, bt_row, q = _floor_program(q_ptr, pos_ptr, bt_ptr, bt_stride, HKV, D,
                                                BLOCK_M, PART)  # fmt: skip
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    total = tl.zeros((PAGE, D), tl.float32)
    for lp in tl.range(start // PAGE, (stop + PAGE - 1) // PAGE, num_stages=STAGES):
        page = tl.load(bt_row + lp)
        k = S._box(k_desc, page, hk, HKV, D, PAGE, HND)
        v = S._box(v_desc, page, hk, HKV, D, PAGE, HND)
        acc, total = _floor_use(q, k, v, acc, total, DOTS)
    _floor_sink(sink_ptr, acc, total, HKV)


@triton.jit(do_not_specialize=["bt_stride", "max_spans", "window"])
def split_pdl_kernel(q_ptr, k_ptr, v_ptr, ms_ptr, ls_ptr, accs_ptr, pos_ptr, bt_ptr, bt_stride,
                     max_spans, qk_scale, window, HKV: tl.constexpr, GROUP: tl.constexpr,
                     D: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, SPAN: tl.constexpr):  # fmt: skip
    """`split_span_kernel` that lets its dependent grid (the merge, launched with PDL) start
    at once (`gdc_launch_dependents`); the merge's `gdc_wait` still waits for every write."""
    gdc_launch_dependents()
    _split_spans(tl.program_id(2), tl.program_id(0), q_ptr, k_ptr, v_ptr, ms_ptr, ls_ptr,
                 accs_ptr, pos_ptr, bt_ptr, bt_stride, max_spans, qk_scale, window, HKV, GROUP, D,
                 PAGE, BLOCK_M, BLOCK_N, SPAN)  # fmt: skip


def split_kernels() -> dict:
    """The span-kernel variants by name (`SPLIT_VARIANTS`)."""
    from samebits.kernels.triton._attention_kernel import split_span_kernel

    return {"heads": split_span_kernel, "requests": split_requests_first_kernel,
            "runs": split_runs_kernel, "pdl": split_pdl_kernel}  # fmt: skip


def bits(t):
    import torch

    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def floors(kv, hnd_caches: tuple, meta, gb: float, tma: bool = False) -> dict:
    """us and % HBM of each `FLOOR_VARIANTS` launch of `floor_kernel` on this cell's paged K / V
    and their HND copies (`hnd_caches`), or with `tma` of each `TMA_FLOOR_VARIANTS` launch of
    `floor_tma_kernel` (host tensor descriptors: [slots, HKV * D] rows for NHD pages, [pages *
    HKV * PAGE, D] for HND); a launch that fails is recorded as its error."""
    import torch

    from samebits.kernels.triton import attention as A

    r, hkv, page = meta.num_requests, NUM_KV_HEADS, 16
    qf = randn((r * hkv * meta.block_m * HEAD_DIM,), kv.k_cache.dtype, seed=11)
    layouts = {False: (kv.k_cache, kv.v_cache), True: hnd_caches}
    if tma:
        layouts = {hnd: tuple(S.box_descriptor(c, hnd, page) for c in caches)
                   for hnd, caches in layouts.items()}  # fmt: skip
    kernel, extra = (floor_tma_kernel, {}) if tma else (floor_kernel, {"BLOCK_N": A.KEY_BLOCK})
    out: dict = {}
    for part, dots, warps, stages, hnd in TMA_FLOOR_VARIANTS if tma else FLOOR_VARIANTS:
        grid = (hkv, -(-(meta.max_position + 1) // part), r)
        sink = torch.empty((grid[0] * grid[1] * grid[2],), dtype=torch.float32, device="cuda")

        def launch(grid=grid, sink=sink, part=part, dots=dots, warps=warps, stages=stages,
                   hnd=hnd):  # fmt: skip
            kernel[grid](qf, *layouts[hnd], sink, meta.positions, meta.block_tables,
                         meta.block_tables.shape[1], HKV=hkv, D=HEAD_DIM, PAGE=page,
                         BLOCK_M=meta.block_m, PART=part, DOTS=dots, STAGES=stages, HND=hnd,
                         num_warps=warps, **extra)  # fmt: skip

        name = "{}_{}_p{}_w{}_s{}{}".format("tma" if tma else "floor", "dots" if dots else "sum",
                                            part, warps, stages, "_hnd" if hnd else "")  # fmt: skip
        try:
            ms = bench_graph(launch, 30)
            out[name] = {"us": round(ms * 1e3, 2), "programs": grid[0] * grid[1] * grid[2],
                         "pct_hbm": round(100 * gb / (ms / 1e3) / hbm_gbps(), 1)}  # fmt: skip
        except Exception as e:  # a launch this stack cannot build: recorded, the run goes on
            out[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    return out


def shapes(args: dict, grid: tuple, merge, ref, gb: float) -> dict:
    """Each `split_probe_shapes.SHAPE_VARIANTS` launch at each `SHAPE_STAGES`: its states
    folded by the shipped merge (`merge(out)`), bits against `ref`; us of the span launch(es)
    alone and of the step with the merge in one graph, and % HBM of the step."""
    import torch

    from samebits.kernels.triton import attention as A

    r, heads, d = args["q"].shape
    scores = torch.empty((r * heads * S.scores_stride(args["max_position"], A.KEY_BLOCK),),
                         dtype=torch.float32, device=args["q"].device)  # fmt: skip
    out: dict = {}
    for variant in S.SHAPE_VARIANTS:
        for stages in SHAPE_STAGES:
            opts = A.split_options(grid[0] * grid[1] * grid[2])
            opts = {**opts, **({"num_stages": stages} if stages else {})}

            def spans(v=variant, o=opts):
                S.launch_shape(v, args, scores, grid, o)

            name, got = f"{variant[0]}_s{stages}", torch.empty_like(ref)
            try:
                spans()
                merge(got)
                step_us = bench_graph(lambda s=spans: (s(), merge(torch.empty_like(ref))), 30) * 1e3
                out[name] = {"bits_equal": bool(torch.equal(bits(got), bits(ref))),
                             "spans_us": round(bench_graph(spans, 30) * 1e3, 2),
                             "step_us": round(step_us, 2),
                             "pct_hbm_step": round(100 * gb / (step_us / 1e6) / hbm_gbps(), 1)}  # fmt: skip
            except Exception as e:  # a variant that fails to build or run: recorded, run goes on
                out[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    return out


def pdl_pair(q, split_launch, merge_sliced, ref, opts: dict) -> dict:
    """The step as two launches in one graph, the shipped merge's launch (4 spans a trip, 3
    stages, the group's tile height, its warps) by `merge_slices_kernel`: plain, and with programmatic
    dependent launch (the span kernel lets the merge start at once; the merge waits for its
    writes before reading them); `opts`: the plan's span launch options. us of each, and
    whether each output has `ref`'s bits."""
    import torch

    from samebits.kernels.triton import attention as A

    row: dict = {}
    bm = A.merge_block_m(NUM_HEADS // NUM_KV_HEADS)
    for name, kernel, pdl in (("plain", "heads", False), ("pdl", "pdl", True)):
        out = torch.empty_like(q)

        def step(kernel=kernel, pdl=pdl, out=out):
            split_launch(opts, kernel)
            merge_sliced(out, HEAD_DIM, A.MERGE_WARPS, 3, A.MERGE_UNROLL, bm, pdl)

        try:
            step()
            row[name] = {"us": round(bench_graph(step, 30) * 1e3, 2),
                         "bits_equal": bool(torch.equal(bits(out), bits(ref)))}  # fmt: skip
        except Exception as e:  # a launch this stack cannot capture: recorded, the run goes on
            row[name] = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    return row


def cell(batch: int, context: int, merges: bool = True, splits_too: bool = True,
         floor: bool = False) -> dict:  # fmt: skip
    import torch

    from samebits.kernels.triton import attention as A
    from samebits.kernels.triton._attention_kernel import merge_spans_kernel

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

    launch = dict(num_warps=A.MERGE_WARPS, enable_fp_fusion=A.FP_FUSION, **facts)

    kernels = split_kernels()

    def split_launch(opts, kernel="heads", s=splits):  # s programs a request; `opts`: launch
        grid = (hkv, s, r) if kernel in ("heads", "pdl") else (r, s, hkv)
        kernels[kernel][grid](
            q, kv.k_cache, kv.v_cache, m_s, l_s, acc_s, meta.positions, meta.block_tables,
            meta.block_tables.shape[1], max_spans, scale, win, PAGE=16, BLOCK_N=A.KEY_BLOCK,
            enable_fp_fusion=A.FP_FUSION, **facts, **opts)  # fmt: skip

    def split_as(kernel, per, warps, stages, cap):  # a variant of `SPLIT_VARIANTS`
        s = -(-max_spans // per) if per else splits
        opts = A.split_options(r * s * hkv)
        opts = {**opts, **({"num_warps": warps} if warps else {}),
                **({"num_stages": stages} if stages else {})}  # fmt: skip
        opts = opts if cap < 0 else {k: v for k, v in opts.items() if k != "maxnreg"}
        split_launch({**opts, **({"maxnreg": cap} if cap > 0 else {})}, kernel, s)

    def split():  # the plan's own launch (`attention._split_decode`), its options verbatim
        split_launch(A.split_options(r * splits * hkv))

    def merge(out):  # the shipped merge, as the plan launches it (`attention._split_decode`)
        merge_spans_kernel[(r, hkv)](out, m_s, l_s, acc_s, meta.positions, max_spans, win,
                                     UNROLL=A.MERGE_UNROLL,
                                     **{**launch, "BLOCK_M": A.merge_block_m(meta.group)})  # fmt: skip

    def merge_sliced(out, block_d, warps=4, stages=1, unroll=1, bm=0, pdl=False):
        merge_slices_kernel[(r, hkv, d // block_d)](
            out, m_s, l_s, acc_s, meta.positions, max_spans, win, BLOCK_D=block_d, STAGES=stages,
            UNROLL=unroll, PDL=pdl, num_warps=warps, enable_fp_fusion=A.FP_FUSION,
            **({"launch_pdl": True} if pdl else {}),
            **{**facts, "BLOCK_M": bm or meta.block_m})  # fmt: skip

    weights = torch.empty((2 * m_s.numel(),), dtype=torch.float32, device="cuda")

    def merge_two_phase(out, warps, stages, sb, bm):
        merge_two_phase_kernel[(r, hkv)](
            out, m_s, l_s, acc_s, weights, meta.positions, max_spans, win, m_s.numel(), SB=sb,
            STAGES=stages, num_warps=warps, enable_fp_fusion=A.FP_FUSION,
            **{**facts, "BLOCK_M": bm})  # fmt: skip

    def merge_flat(out, warps, stages, bm):
        merge_flat_kernel[(r, hkv)](
            out, m_s, l_s, acc_s, meta.positions, max_spans, win, STAGES=stages, num_warps=warps,
            enable_fp_fusion=A.FP_FUSION, **{**facts, "BLOCK_M": bm})  # fmt: skip

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
    eq: dict = {}
    if floor:
        hnd = tuple(S.hnd_pages(c, 16) for c in (kv.k_cache, kv.v_cache))
        row["floors"] = floors(kv, hnd, meta, gb)
        row["tma_floors"] = floors(kv, hnd, meta, gb, tma=True)
        row["pdl"] = pdl_pair(q, split_launch, merge_sliced, ref, A.split_options(r * splits * hkv))
        shape_args = dict(q=q, k=kv.k_cache, v=kv.v_cache, k_hnd=hnd[0], v_hnd=hnd[1],
                          m_s=m_s, l_s=l_s, acc_s=acc_s,
                          pos=meta.positions, bt=meta.block_tables, max_spans=max_spans,
                          scale=scale, window=win, max_position=meta.max_position,
                          group=meta.group, d=d, page=16, block_m=meta.block_m,
                          block_n=A.KEY_BLOCK, span=meta.span)  # fmt: skip
        row["shapes"] = shapes(shape_args, (hkv, splits, r), merge, ref, gb)
        split()
    for v in SPLIT_VARIANTS if splits_too else []:  # states folded by the shipped merge
        name, out = "split_{}_per{}_w{}_s{}_r{}".format(*v), torch.empty_like(q)
        split_as(*v)
        merge(out)
        eq[name] = bool(torch.equal(bits(out), bits(ref)))
        t[name] = bench_graph(lambda v=v: split_as(*v), 30)
    split()
    families = [] if not merges else [("merge_d{}_w{}_s{}_u{}_m{}", MERGE_VARIANTS, merge_sliced),
                ("flat_w{}_s{}_m{}", FLAT_VARIANTS, merge_flat),
                ("two_phase_w{}_s{}_sb{}_m{}", TWO_PHASE_VARIANTS, merge_two_phase)]  # fmt: skip
    for fmt, variants, launch_one in families:
        for v in variants:
            out = torch.empty_like(q)
            launch_one(out, *v)
            eq[fmt.format(*v)] = bool(torch.equal(bits(out), bits(ref)))
            t[fmt.format(*v)] = bench_graph(
                lambda v=v, f=launch_one: f(torch.empty_like(q), *v), 30
            )
    row.update(gb=gb, us={k: round(v * 1e3, 2) for k, v in t.items()}, bits_equal=eq,
               pct_hbm_whole=round(100 * gb / (t["whole"] / 1e3) / hbm_gbps(), 1))  # fmt: skip
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    ap.add_argument("--split-only", action="store_true", help="no merge variants")
    ap.add_argument("--merge-only", action="store_true", help="no span-kernel variants")
    ap.add_argument("--floor", action="store_true",
                    help="only the span launch's floors (`FLOOR_VARIANTS`), PDL and launch shapes")  # fmt: skip
    args = ap.parse_args()
    rows = []
    for batch, context in CELLS:
        merges, splits = not (args.split_only or args.floor), not (args.merge_only or args.floor)
        rows.append(cell(batch, context, merges, splits, args.floor))
        print(json.dumps(rows[-1]), flush=True)
        if args.out:  # after every cell: a run cut short keeps the cells it finished
            Path(args.out).write_text(json.dumps({"machine": machine_info(), "rows": rows},
                                                 indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
