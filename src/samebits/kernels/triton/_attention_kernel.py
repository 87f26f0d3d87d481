"""Triton kernels of paged causal attention (prefill, chunked prefill, decode, mixed steps).

Definition (DESIGN.md §2b): a query row at absolute position t reduces keys 0..t in spans of
SPAN keys at absolute positions 0, SPAN, 2*SPAN, ...; inside a span, key tiles of BLOCK_N at
absolute positions are reduced by an online softmax in tile order from a fresh state; the span
states are folded in span order, from the empty state, by `_merge` (one written formula:
explicit fma, so no compiler contracts it differently in two kernels); the row's output is
acc / l (div_rn). A sliding window of W keys (`window`, Gemma 3's local layers; full attention
passes a W above any position, `attention.FULL_WINDOW`) keeps keys lo..t, lo = max(t - W + 1,
0): a key below lo counts as a key above t does (score -inf, p = 0), and a tile or span with no
key in lo..t leaves the row's state as it was (the same guards), so a row's value depends on
its own t and W only. Every launch computes exactly that:

- `paged_attention_kernel` runs a program's spans in sequence (prefill, chunked prefill,
  mixed steps, decode of large batches);
- `split_span_kernel` + `merge_spans_kernel` (decode of small batches) compute each span in its
  own program, store its state (fp32, exact) and fold the stored states in span order.

Every operation has a written definition a CPU replays bit for bit
(`samebits.kernels.replay.attention`): the exponentials are `ex2q` (`_softexp2.py`: the
argument rounded to a multiple of 2^-12, then PTX ``ex2.approx.ftz``, whose bits on that grid
are a 4,096-entry table, `kernels/replay/ex2q.py`; every argument here is a value minus a
maximum at least as large, so <= 0, or NaN); the launches
pass ``enable_fp_fusion=False`` (`attention.FP_FUSION`), so the only fused multiply-adds are
the written ``tl.fma``; the tile update is ``l' = fma(l, alpha, row_sum)`` and
``acc' = tl.dot(p, v, acc * alpha)`` (the rescaled state is the MMA chain's accumulator);
a key outside lo..t has score -inf and p = +0 (an index select). Scores and P@V are
``tl.dot`` (fp32 accumulate); the softmax denominator is also an MMA
(``p @ ones``, one column kept), never a ``tl.sum`` over the tile, because the tile height
(BLOCK_M) and the row -> (token, head) packing change between launches. ``tl.max`` is exact.
A row whose position is below a tile's or a span's first key, or whose window starts past its
last key, keeps its state through ``tl.where``, so the extra tiles and spans a program runs for
its other rows never touch it.
A key tile wholly inside every live row's window (its keys in each row's lo..t: in a causal
prefill, all but the tiles at the diagonal and the window's start) runs the same update with
no mask and no select (`_attend_tile_interior`): each select there returns its first operand.
"""

from __future__ import annotations

import triton
import triton.language as tl

from samebits.kernels.triton._softexp2 import ex2q


@triton.jit
def _attend_tile(q, k_ptr, v_ptr, bt_row, key0, pos, lo, last, hk, qk_scale, m_i, l_i, acc,
                 HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                 BLOCK_N: tl.constexpr):  # fmt: skip
    """One key tile [key0, key0 + BLOCK_N): the online-softmax update over each row's keys
    lo..pos, guarded per row (a row with none of its keys in the tile keeps its state)."""
    d = tl.arange(0, D)
    key = key0 + tl.arange(0, BLOCK_N)
    kmask = key <= last
    page = tl.load(bt_row + key // PAGE, mask=kmask, other=0).to(tl.int64)
    kv = ((page * PAGE + key % PAGE) * HKV + hk) * D
    k = tl.load(k_ptr + kv[:, None] + d[None, :], mask=kmask[:, None], other=0.0)
    v = tl.load(v_ptr + kv[:, None] + d[None, :], mask=kmask[:, None], other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
    keep = (key[None, :] <= pos[:, None]) & (key[None, :] >= lo[:, None])
    s = tl.where(keep, s, float("-inf"))
    active = (key0 <= pos) & (key0 + BLOCK_N > lo)
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = ex2q(tl.where(active, m_i - m_new, 0.0))
    p = tl.where(active[:, None] & keep, ex2q(s - m_new[:, None]), 0.0).to(v.dtype)
    ones = tl.full((BLOCK_N, 16), 1.0, v.dtype)
    col0 = tl.arange(0, 16)[None, :] == 0
    row_sum = tl.sum(tl.where(col0, tl.dot(p, ones, input_precision="ieee"), 0.0), axis=1)
    l_new = tl.fma(l_i, alpha, row_sum)
    acc_new = tl.dot(p, v, acc * alpha[:, None], input_precision="ieee")
    m_i = tl.where(active, m_new, m_i)
    l_i = tl.where(active, l_new, l_i)
    acc = tl.where(active[:, None], acc_new, acc)
    return m_i, l_i, acc


@triton.jit
def _attend_tile_interior(q, k_ptr, v_ptr, bt_row, key0, hk, qk_scale, m_i, l_i, acc,
                          HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                          BLOCK_N: tl.constexpr):  # fmt: skip
    """`_attend_tile` on a tile interior to every live row (each of its keys in each live
    row's lo..pos): every ``keep`` and ``active`` there is true, so each select would return
    its first operand; this is the same operations on the same values, without them."""
    d = tl.arange(0, D)
    key = key0 + tl.arange(0, BLOCK_N)
    page = tl.load(bt_row + key // PAGE).to(tl.int64)
    kv = ((page * PAGE + key % PAGE) * HKV + hk) * D
    k = tl.load(k_ptr + kv[:, None] + d[None, :])
    v = tl.load(v_ptr + kv[:, None] + d[None, :])
    s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = ex2q(m_i - m_new)
    p = ex2q(s - m_new[:, None]).to(v.dtype)
    ones = tl.full((BLOCK_N, 16), 1.0, v.dtype)
    col0 = tl.arange(0, 16)[None, :] == 0
    row_sum = tl.sum(tl.where(col0, tl.dot(p, ones, input_precision="ieee"), 0.0), axis=1)
    l_i = tl.fma(l_i, alpha, row_sum)
    acc = tl.dot(p, v, acc * alpha[:, None], input_precision="ieee")
    return m_new, l_i, acc


@triton.jit
def _interior(pos, lo, live, last, BLOCK_N: tl.constexpr):
    """[inner0, inner1): the key tiles interior to every live row of a program (inner0: the
    first tile start at or above every lo; inner1: the last tile end at or below every
    position + 1; an empty range where they cross)."""
    first = tl.maximum(tl.min(tl.where(live, pos, last), axis=0), 0)
    inner0 = (tl.max(tl.where(live, lo, 0), axis=0) + BLOCK_N - 1) // BLOCK_N * BLOCK_N
    inner1 = (first + 1) // BLOCK_N * BLOCK_N
    return inner0, inner1


@triton.jit
def _attend_span(q, k_ptr, v_ptr, bt_row, span0, pos, lo, last, inner0, inner1, hk, qk_scale,
                 HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, SPAN: tl.constexpr):  # fmt: skip
    """The state (m, l, acc) of span [span0, span0 + SPAN): its tiles in key order from a fresh
    state, the ones in [inner0, inner1) by the unmasked update. Three loops, not an ``if`` in
    one: a branch in the tile loop costs Triton's load pipelining (no async copy)."""
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
                                                m_s, l_s, acc_s, HKV, D, PAGE, BLOCK_N)  # fmt: skip
    for key0 in range(b, stop, BLOCK_N):
        m_s, l_s, acc_s = _attend_tile(q, k_ptr, v_ptr, bt_row, key0, pos, lo, last, hk, qk_scale,
                                       m_s, l_s, acc_s, HKV, D, PAGE, BLOCK_N)  # fmt: skip
    return m_s, l_s, acc_s


@triton.jit
def _merge(m_i, l_i, acc, m_s, l_s, acc_s, take):
    """Fold span state (m_s, l_s, acc_s) into (m_i, l_i, acc) where `take` (rows in the span):
    m' = max(m_i, m_s); a = 2^(m_i - m'), b = 2^(m_s - m'); l' = fma(l_i, a, l_s * b);
    acc' = fma(acc, a, acc_s * b). The one merge formula of every launch."""
    m_new = tl.maximum(m_i, m_s)
    a = ex2q(tl.where(take, m_i - m_new, 0.0))
    b = ex2q(tl.where(take, m_s - m_new, 0.0))
    l_new = tl.fma(l_i, a, l_s * b)
    acc_new = tl.fma(acc, a[:, None], acc_s * b[:, None])
    m_i = tl.where(take, m_new, m_i)
    l_i = tl.where(take, l_new, l_i)
    acc = tl.where(take[:, None], acc_new, acc)
    return m_i, l_i, acc


@triton.jit
def _query_rows(q_ptr, tok, live, hk, r, HKV: tl.constexpr, GROUP: tl.constexpr,
                D: tl.constexpr):  # fmt: skip
    """Row offsets of (token, head) rows of KV head hk, and the q tile (0 on dead rows)."""
    d = tl.arange(0, D)
    rows = (tok.to(tl.int64) * (HKV * GROUP) + hk * GROUP + r % GROUP) * D
    q = tl.load(q_ptr + rows[:, None] + d[None, :], mask=live[:, None], other=0.0)
    return rows, q


@triton.jit(do_not_specialize=["bt_stride", "window"])
def paged_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, pos_ptr, req_ptr, row0_ptr, qend_ptr,
                           bt_ptr, bt_stride, qk_scale, window, HKV: tl.constexpr,
                           GROUP: tl.constexpr,
                           D: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr, SPAN: tl.constexpr):  # fmt: skip
    """Program (tile of query tokens of one request, kv head): rows are (token, head) pairs;
    the spans of the tile's last row in sequence, each folded into the rows it covers."""
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
    inner0, inner1 = _interior(pos, lo, live, last, BLOCK_N)
    bt_row = bt_ptr + req.to(tl.int64) * bt_stride
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for span0 in range(0, last + 1, SPAN):
        m_s, l_s, acc_s = _attend_span(q, k_ptr, v_ptr, bt_row, span0, pos, lo, last, inner0,
                                       inner1, hk, qk_scale, HKV, D, PAGE, BLOCK_M, BLOCK_N,
                                       SPAN)  # fmt: skip
        m_i, l_i, acc = _merge(m_i, l_i, acc, m_s, l_s, acc_s, (span0 <= pos) & (span0 + SPAN > lo))
    out = tl.math.div_rn(acc, l_i[:, None])
    d = tl.arange(0, D)
    tl.store(o_ptr + rows[:, None] + d[None, :], out.to(o_ptr.dtype.element_ty), mask=live[:, None])


@triton.jit
def _state_offsets(tok, hk, r, HKV: tl.constexpr, GROUP: tl.constexpr):
    """Index of (token, head) rows in the [tokens, heads] layout of the stored span states."""
    return tok.to(tl.int64) * (HKV * GROUP) + hk * GROUP + r % GROUP


@triton.jit
def _decode_rows(req, hk, q_ptr, pos_ptr, bt_ptr, bt_stride, window, HKV: tl.constexpr,
                 GROUP: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr):  # fmt: skip
    """A decode program's rows, the GROUP heads of KV head hk of token req (request req's):
    lanes, live lanes, tokens, positions, window starts, the q tile, the last position, the
    interior key tiles and the request's block-table row."""
    r = tl.arange(0, BLOCK_M)
    live = r < GROUP
    tok = tl.zeros((BLOCK_M,), tl.int32) + req
    pos = tl.load(pos_ptr + tok, mask=live, other=-1)
    lo = tl.maximum(pos - window + 1, 0)
    _, q = _query_rows(q_ptr, tok, live, hk, r, HKV, GROUP, D)
    last = tl.max(pos, axis=0)
    inner0, inner1 = _interior(pos, lo, live, last, BLOCK_N)
    bt_row = bt_ptr + req.to(tl.int64) * bt_stride
    return r, live, tok, pos, lo, q, last, inner0, inner1, bt_row


@triton.jit
def _store_state(ms_ptr, ls_ptr, accs_ptr, at, live, m_s, l_s, acc_s, D: tl.constexpr):
    """Store a span state (m, l, acc) of the live rows at state rows ``at``."""
    d = tl.arange(0, D)
    tl.store(ms_ptr + at, m_s, mask=live)
    tl.store(ls_ptr + at, l_s, mask=live)
    tl.store(accs_ptr + at[:, None] * D + d[None, :], acc_s, mask=live[:, None])


@triton.jit
def _split_spans(req, hk, q_ptr, k_ptr, v_ptr, ms_ptr, ls_ptr, accs_ptr, pos_ptr, bt_ptr,
                 bt_stride, max_spans, qk_scale, window, HKV: tl.constexpr, GROUP: tl.constexpr,
                 D: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, SPAN: tl.constexpr):  # fmt: skip
    """Spans j, j + S, j + 2S, ... (j = program_id(1) of S = num_programs(1)) of token req's
    GROUP rows of KV head hk, each span's state stored at [req * max_spans + span]."""
    r, live, tok, pos, lo, q, last, inner0, inner1, bt_row = _decode_rows(
        req, hk, q_ptr, pos_ptr, bt_ptr, bt_stride, window, HKV, GROUP, D, BLOCK_M, BLOCK_N
    )  # fmt: skip
    for span in range(tl.program_id(1), last // SPAN + 1, tl.num_programs(1)):
        m_s, l_s, acc_s = _attend_span(q, k_ptr, v_ptr, bt_row, span * SPAN, pos, lo, last,
                                       inner0, inner1, hk, qk_scale, HKV, D, PAGE, BLOCK_M,
                                       BLOCK_N, SPAN)  # fmt: skip
        at = _state_offsets(tok * max_spans + span, hk, r, HKV, GROUP)
        _store_state(ms_ptr, ls_ptr, accs_ptr, at, live, m_s, l_s, acc_s, D)


@triton.jit(do_not_specialize=["bt_stride", "max_spans", "window"])
def split_span_kernel(q_ptr, k_ptr, v_ptr, ms_ptr, ls_ptr, accs_ptr, pos_ptr, bt_ptr, bt_stride,
                      max_spans, qk_scale, window, HKV: tl.constexpr, GROUP: tl.constexpr,
                      D: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr,
                      BLOCK_N: tl.constexpr, SPAN: tl.constexpr):  # fmt: skip
    """Decode (one token per request, token r of request r). Program (kv head, j, r) computes
    spans j, j + S, j + 2S, ... (S = programs per request) of token r's GROUP rows and stores
    each span's state at [r * max_spans + span]. The KV heads are the grid's first axis, so the
    programs in flight read all heads of the same token rows at about the same time."""
    _split_spans(tl.program_id(2), tl.program_id(0), q_ptr, k_ptr, v_ptr, ms_ptr, ls_ptr,
                 accs_ptr, pos_ptr, bt_ptr, bt_stride, max_spans, qk_scale, window, HKV, GROUP, D,
                 PAGE, BLOCK_M, BLOCK_N, SPAN)  # fmt: skip


@triton.jit(do_not_specialize=["max_spans", "window"])
def merge_spans_kernel(o_ptr, ms_ptr, ls_ptr, accs_ptr, pos_ptr, max_spans, window,
                       HKV: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr,
                       BLOCK_M: tl.constexpr, SPAN: tl.constexpr,
                       UNROLL: tl.constexpr):  # fmt: skip
    """Program (r, kv head): fold token r's stored span states in span order (the spans with
    a key in its window), UNROLL spans a loop trip, then acc / l."""
    req = tl.program_id(0)
    hk = tl.program_id(1)
    r = tl.arange(0, BLOCK_M)
    live = r < GROUP
    tok = tl.zeros((BLOCK_M,), tl.int32) + req
    pos = tl.load(pos_ptr + tok, mask=live, other=-1)
    lo = tl.maximum(pos - window + 1, 0)
    d = tl.arange(0, D)
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    # the spans in trips of UNROLL, whose state loads issue together (one load per span
    # waited for its own loads before), folded in span order; a span past the last is not
    # taken (`_merge` keeps the state): the same folds in the same order
    n = tl.max(pos, axis=0) // SPAN + 1
    for c0 in tl.range(0, n, UNROLL, num_stages=3):
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
