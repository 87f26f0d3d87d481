"""Launch shapes of the split-KV span computation for `split_decode_probe.py --floor` (issue
25): two with more parallel work per span than one program a span (batch-1 decode at
4k-16k), and one page layout. Each computes the span states of `split_span_kernel` (the same
operations on the same values, so the same bits: checked in the probe run, as integer views
of the merged output):

- **head-dim slices** (`split_shape_kernel`): program (kv head x slice, j, r) runs span j's
  whole softmax (the same scores, maxima, p and row sums as every other slice of it) and the
  P @ V MMA chain on its DV columns of V only; an MMA output element depends on its own row of
  p and column of V, so the slices' columns are the full chain's. It stores m and l from slice
  0 only. K is read by every slice (through L2 when they run together: slice is the fastest
  grid axis), V once: the per-program bytes and MMA work a tile fall with the slice width;
- **scores first** (`scores_kernel`, then `split_scored_kernel`): every key tile's scores
  ``q k^T * scale`` (the tile's one `tl.dot`, the same operands) in its own program, stored
  as fp32 (exact), then the spans' online softmax reads them instead of K: each span's chain
  loads only V and its scores, and holds one MMA a tile (P @ V) instead of two;
- **HND pages** (`split_shape_kernel` with DV = D and HND): the shipped computation reading
  a copy of the caches whose pages are [HKV, PAGE, D] (`hnd_pages`; the plan's are [PAGE,
  HKV, D]): a program's 16 keys of a page are one 4 KB piece, not 16 pieces of 256 bytes;
- **TMA boxes** (`split_shape_kernel`, NHD or HND pages): the shipped computation with each key
  tile's K and V read as four page boxes of [16, D], one tensor-memory-accelerator copy each
  (no per-thread addresses); keys past the last read as 0 (a `where`), as the shipped masked
  loads give. TMA 1 stacks the boxes into the tiles in key order; TMA 2 keeps them apart:
  the scores are the four boxes' QK MMAs side by side (an output element is its row of q and
  its key's row of K), P @ ones and P @ V four chained MMAs of 16 keys each, which is the
  chain of k steps a 64-key MMA runs, in the same order from the same accumulator.

One tile function (`_probe_tile`) covers them all and the masked / interior forms of the
shipped `_attend_tile` / `_attend_tile_interior`: a deliberate near-copy with knobs the shipped
kernel does not have (its source is part of the numerics id). Checked on the CPU with the
GPU-semantics interpreter (`kernels.replay.interpret`) against the shipped kernels' bits.
Evidence class: measurement (the probe), test (the CPU check).
"""

from __future__ import annotations

import triton
import triton.language as tl

from samebits.kernels.triton._attention_kernel import _decode_rows, _state_offsets
from samebits.kernels.triton._softexp2 import ex2q


@triton.jit
def _paged_rows(bt_row, key, kmask, hk, HKV: tl.constexpr, D: tl.constexpr,
                PAGE: tl.constexpr, MASKED: tl.constexpr, HND: tl.constexpr):  # fmt: skip
    """Element offsets of keys `key`'s rows of KV head hk: in the plan's cache, pages of
    [PAGE, HKV, D] ("NHD"), or in a copy whose pages are [HKV, PAGE, D] (HND)."""
    if MASKED:
        page = tl.load(bt_row + key // PAGE, mask=kmask, other=0).to(tl.int64)
    else:
        page = tl.load(bt_row + key // PAGE).to(tl.int64)
    if HND:
        return ((page * HKV + hk) * PAGE + key % PAGE) * D
    return ((page * PAGE + key % PAGE) * HKV + hk) * D


@triton.jit
def _rows2(a, b):
    """[R, C] `a` above [R, C] `b`: [2R, C] (join, permute, reshape: no reordering)."""
    j = tl.permute(tl.join(a, b), (2, 0, 1))
    return tl.reshape(j, (2 * a.shape[0], a.shape[1]))


@triton.jit
def _box(desc, page, hk, HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
         HND: tl.constexpr):  # fmt: skip
    """One page's [PAGE, D] box of KV head hk by one TMA copy (`desc` over rows of HKV * D,
    NHD pages, or over rows of D, HND pages)."""
    if HND:
        return desc.load([(page * HKV + hk) * PAGE, 0])
    return desc.load([page * PAGE, hk * D])


@triton.jit
def _page_of(bt_row, lp, first, last, MASKED: tl.constexpr):
    """The physical page of logical page lp (first key `first`); MASKED: 0 past `last`."""
    if MASKED:
        return tl.load(bt_row + lp, mask=first <= last, other=0)
    return tl.load(bt_row + lp)


@triton.jit
def _masked_box(desc, page, first, last, hk, HKV: tl.constexpr, D: tl.constexpr,
                PAGE: tl.constexpr, MASKED: tl.constexpr, HND: tl.constexpr):  # fmt: skip
    """`page`'s box of KV head hk, keys first .. first + PAGE - 1; MASKED: rows past `last` 0."""
    box = _box(desc, page, hk, HKV, D, PAGE, HND)
    if MASKED:
        box = tl.where((first + tl.arange(0, PAGE) <= last)[:, None], box, 0.0)
    return box


@triton.jit
def _four_pages(bt_row, key0, last, PAGE: tl.constexpr, MASKED: tl.constexpr):
    """The physical pages of the four logical pages of key tile key0 (`_page_of`)."""
    lp = key0 // PAGE
    return (_page_of(bt_row, lp, key0, last, MASKED),
            _page_of(bt_row, lp + 1, key0 + PAGE, last, MASKED),
            _page_of(bt_row, lp + 2, key0 + 2 * PAGE, last, MASKED),
            _page_of(bt_row, lp + 3, key0 + 3 * PAGE, last, MASKED))  # fmt: skip


@triton.jit
def _stacked(desc, g0, g1, g2, g3, key0, last, hk, HKV: tl.constexpr, D: tl.constexpr,
             PAGE: tl.constexpr, MASKED: tl.constexpr, HND: tl.constexpr):  # fmt: skip
    """Pages g0..g3's boxes (`_masked_box`) stacked in key order: the [4 * PAGE, D] tile."""
    b0 = _masked_box(desc, g0, key0, last, hk, HKV, D, PAGE, MASKED, HND)
    b1 = _masked_box(desc, g1, key0 + PAGE, last, hk, HKV, D, PAGE, MASKED, HND)
    b2 = _masked_box(desc, g2, key0 + 2 * PAGE, last, hk, HKV, D, PAGE, MASKED, HND)
    b3 = _masked_box(desc, g3, key0 + 3 * PAGE, last, hk, HKV, D, PAGE, MASKED, HND)
    return _rows2(_rows2(b0, b1), _rows2(b2, b3))


@triton.jit
def _tma_kv(k_desc, v_desc, bt_row, key0, last, hk, HKV: tl.constexpr, D: tl.constexpr,
            PAGE: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
            HND: tl.constexpr):  # fmt: skip
    """The K and V tiles of keys [key0, key0 + BLOCK_N) (four pages) as four TMA boxes each,
    stacked in key order; MASKED: keys past `last` read as 0, as the shipped masked loads."""
    tl.static_assert(BLOCK_N == 4 * PAGE, "a key tile is four pages")
    g0, g1, g2, g3 = _four_pages(bt_row, key0, last, PAGE, MASKED)
    k = _stacked(k_desc, g0, g1, g2, g3, key0, last, hk, HKV, D, PAGE, MASKED, HND)
    v = _stacked(v_desc, g0, g1, g2, g3, key0, last, hk, HKV, D, PAGE, MASKED, HND)
    return k, v


@triton.jit
def _tile_scores(q, k_ptr, kv, kmask, qk_scale, D: tl.constexpr, MASKED: tl.constexpr):
    """The tile's scores as `_attend_tile` computes them (masked-out keys read as 0)."""
    d = tl.arange(0, D)
    if MASKED:
        k = tl.load(k_ptr + kv[:, None] + d[None, :], mask=kmask[:, None], other=0.0)
    else:
        k = tl.load(k_ptr + kv[:, None] + d[None, :])
    return tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale


@triton.jit
def _softmax_p(s, m_i, key, key0, pos, lo, dtype: tl.constexpr, BLOCK_N: tl.constexpr,
               MASKED: tl.constexpr):  # fmt: skip
    """The shipped tile update's p (in `dtype`), alpha, new maximum and `active` rows from the
    tile's scores `s` (MASKED: the guarded form; else the interior one, `active` unused)."""
    if MASKED:
        keep = (key[None, :] <= pos[:, None]) & (key[None, :] >= lo[:, None])
        s = tl.where(keep, s, float("-inf"))
        active = (key0 <= pos) & (key0 + BLOCK_N > lo)
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = ex2q(tl.where(active, m_i - m_new, 0.0))
        p = tl.where(active[:, None] & keep, ex2q(s - m_new[:, None]), 0.0).to(dtype)
    else:
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        active = m_new == m_new
        alpha = ex2q(m_i - m_new)
        p = ex2q(s - m_new[:, None]).to(dtype)
    return p, alpha, m_new, active


@triton.jit
def _commit(m_i, l_i, acc, m_new, l_new, acc_new, active, MASKED: tl.constexpr):
    """The tile's new state: where `active` (MASKED), else unconditionally."""
    if MASKED:
        return (tl.where(active, m_new, m_i), tl.where(active, l_new, l_i),
                tl.where(active[:, None], acc_new, acc))  # fmt: skip
    return m_new, l_new, acc_new


@triton.jit
def _first_col_sum(x):
    """Row sums taken from column 0 of an MMA output [M, 16] (the shipped denominator)."""
    return tl.sum(tl.where(tl.arange(0, 16)[None, :] == 0, x, 0.0), axis=1)


@triton.jit
def _probe_tile(q, k_ptr, v_ptr, s_ptr, srow, bt_row, key0, pos, lo, last, hk, qk_scale, m_i,
                l_i, acc, dv0, HKV: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                PAGE: tl.constexpr, BLOCK_N: tl.constexpr, MASKED: tl.constexpr,
                SCORED: tl.constexpr, HND: tl.constexpr, TMA: tl.constexpr):  # fmt: skip
    """`_attend_tile` (MASKED) or `_attend_tile_interior` on V's columns dv0 .. dv0 + DV; the
    scores from K (SCORED false) or loaded from s_ptr at rows `srow` (stored by
    `scores_kernel`: the same values); K and V in pages of [HKV, PAGE, D] where HND; TMA:
    k_ptr / v_ptr are tensor descriptors, the tiles read as page boxes (DV = D), stacked into
    tiles (1: `_tma_kv`) or used box by box (2: `_tma_paged_tile`)."""
    key = key0 + tl.arange(0, BLOCK_N)
    kmask = key <= last
    if TMA == 2:
        m_i, l_i, acc = _tma_paged_tile(q, k_ptr, v_ptr, bt_row, key0, pos, lo, last, hk,
                                        qk_scale, m_i, l_i, acc, HKV, D, PAGE, BLOCK_N, MASKED,
                                        HND)  # fmt: skip
    else:
        if TMA == 1:
            k, v = _tma_kv(k_ptr, v_ptr, bt_row, key0, last, hk, HKV, D, PAGE, BLOCK_N, MASKED,
                           HND)  # fmt: skip
            s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
        else:
            kv = _paged_rows(bt_row, key, kmask, hk, HKV, D, PAGE, MASKED, HND)
            dv = dv0 + tl.arange(0, DV)
            if MASKED:
                v = tl.load(v_ptr + kv[:, None] + dv[None, :], mask=kmask[:, None], other=0.0)
            else:
                v = tl.load(v_ptr + kv[:, None] + dv[None, :])
            if SCORED:
                s = tl.load(s_ptr + srow[:, None] + key[None, :], mask=kmask[None, :], other=0.0)
            else:
                s = _tile_scores(q, k_ptr, kv, kmask, qk_scale, D, MASKED)
        p, alpha, m_new, active = _softmax_p(s, m_i, key, key0, pos, lo, v.dtype, BLOCK_N, MASKED)
        ones = tl.full((BLOCK_N, 16), 1.0, v.dtype)
        l_new = tl.fma(l_i, alpha, _first_col_sum(tl.dot(p, ones, input_precision="ieee")))
        acc_new = tl.dot(p, v, acc * alpha[:, None], input_precision="ieee")
        m_i, l_i, acc = _commit(m_i, l_i, acc, m_new, l_new, acc_new, active, MASKED)
    return m_i, l_i, acc


@triton.jit
def _cols2(a, b):
    """[R, C] `a` beside [R, C] `b`: [R, 2C] (join, permute, reshape: no reordering)."""
    j = tl.permute(tl.join(a, b), (0, 2, 1))
    return tl.reshape(j, (a.shape[0], 2 * a.shape[1]))


@triton.jit
def _halves(x):
    """[R, 2C] -> its column halves [R, C], [R, C] (the inverse of `_cols2`)."""
    r = tl.reshape(x, (x.shape[0], 2, x.shape[1] // 2))
    return tl.split(tl.permute(r, (0, 2, 1)))


@triton.jit
def _tma_paged_tile(q, k_desc, v_desc, bt_row, key0, pos, lo, last, hk, qk_scale, m_i, l_i, acc,
                    HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, HND: tl.constexpr):  # fmt: skip
    """The tile update on four TMA page boxes without stacking them: the scores of each box
    (its own QK MMA: an output element is its row of q and its key's row of K, the same chain)
    side by side, then P @ V and P @ ones as four chained MMAs of 16 keys, the chain a
    64-key MMA is (k steps of 16 in key order, from the same accumulator)."""
    f1, f2, f3 = key0 + PAGE, key0 + 2 * PAGE, key0 + 3 * PAGE
    g0, g1, g2, g3 = _four_pages(bt_row, key0, last, PAGE, MASKED)
    k0 = _masked_box(k_desc, g0, key0, last, hk, HKV, D, PAGE, MASKED, HND)
    k1 = _masked_box(k_desc, g1, f1, last, hk, HKV, D, PAGE, MASKED, HND)
    k2 = _masked_box(k_desc, g2, f2, last, hk, HKV, D, PAGE, MASKED, HND)
    k3 = _masked_box(k_desc, g3, f3, last, hk, HKV, D, PAGE, MASKED, HND)
    s01 = _cols2(tl.dot(q, tl.trans(k0), input_precision="ieee"),
                 tl.dot(q, tl.trans(k1), input_precision="ieee"))  # fmt: skip
    s23 = _cols2(tl.dot(q, tl.trans(k2), input_precision="ieee"),
                 tl.dot(q, tl.trans(k3), input_precision="ieee"))  # fmt: skip
    s = _cols2(s01, s23) * qk_scale
    key = key0 + tl.arange(0, BLOCK_N)
    p, alpha, m_new, active = _softmax_p(s, m_i, key, key0, pos, lo, k0.dtype, BLOCK_N, MASKED)
    p01, p23 = _halves(p)
    p0, p1 = _halves(p01)
    p2, p3 = _halves(p23)
    ones = tl.full((PAGE, 16), 1.0, k0.dtype)
    rs = tl.dot(p0, ones, input_precision="ieee")
    rs = tl.dot(p1, ones, rs, input_precision="ieee")
    rs = tl.dot(p2, ones, rs, input_precision="ieee")
    rs = tl.dot(p3, ones, rs, input_precision="ieee")
    l_new = tl.fma(l_i, alpha, _first_col_sum(rs))
    v0 = _masked_box(v_desc, g0, key0, last, hk, HKV, D, PAGE, MASKED, HND)
    v1 = _masked_box(v_desc, g1, f1, last, hk, HKV, D, PAGE, MASKED, HND)
    v2 = _masked_box(v_desc, g2, f2, last, hk, HKV, D, PAGE, MASKED, HND)
    v3 = _masked_box(v_desc, g3, f3, last, hk, HKV, D, PAGE, MASKED, HND)
    a = tl.dot(p0, v0, acc * alpha[:, None], input_precision="ieee")
    a = tl.dot(p1, v1, a, input_precision="ieee")
    a = tl.dot(p2, v2, a, input_precision="ieee")
    a = tl.dot(p3, v3, a, input_precision="ieee")
    return _commit(m_i, l_i, acc, m_new, l_new, a, active, MASKED)


@triton.jit
def _probe_span(q, k_ptr, v_ptr, s_ptr, srow, bt_row, span0, pos, lo, last, inner0, inner1, hk,
                qk_scale, dv0, HKV: tl.constexpr, D: tl.constexpr, DV: tl.constexpr,
                PAGE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                SPAN: tl.constexpr, SCORED: tl.constexpr, HND: tl.constexpr,
                TMA: tl.constexpr):  # fmt: skip
    """`_attend_span` by `_probe_tile`: the span's tiles in key order from a fresh state, the
    ones in [inner0, inner1) unmasked, in three loops."""
    m_s = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_s = tl.zeros((BLOCK_M,), tl.float32)
    acc_s = tl.zeros((BLOCK_M, DV), tl.float32)
    stop = tl.minimum(span0 + SPAN, last + 1)
    a = tl.minimum(tl.maximum(inner0, span0), stop)
    b = tl.maximum(tl.minimum(inner1, stop), a)
    for key0 in range(span0, a, BLOCK_N):
        m_s, l_s, acc_s = _probe_tile(q, k_ptr, v_ptr, s_ptr, srow, bt_row, key0, pos, lo, last,
                                      hk, qk_scale, m_s, l_s, acc_s, dv0, HKV, D, DV, PAGE,
                                      BLOCK_N, True, SCORED, HND, TMA)  # fmt: skip
    for key0 in range(a, b, BLOCK_N):
        m_s, l_s, acc_s = _probe_tile(q, k_ptr, v_ptr, s_ptr, srow, bt_row, key0, pos, lo, last,
                                      hk, qk_scale, m_s, l_s, acc_s, dv0, HKV, D, DV, PAGE,
                                      BLOCK_N, False, SCORED, HND, TMA)  # fmt: skip
    for key0 in range(b, stop, BLOCK_N):
        m_s, l_s, acc_s = _probe_tile(q, k_ptr, v_ptr, s_ptr, srow, bt_row, key0, pos, lo, last,
                                      hk, qk_scale, m_s, l_s, acc_s, dv0, HKV, D, DV, PAGE,
                                      BLOCK_N, True, SCORED, HND, TMA)  # fmt: skip
    return m_s, l_s, acc_s


@triton.jit
def _probe_spans(req, hk, dv0, q_ptr, k_ptr, v_ptr, s_ptr, s_stride, ms_ptr, ls_ptr, accs_ptr,
                 pos_ptr, bt_ptr, bt_stride, max_spans, qk_scale, window, HKV: tl.constexpr,
                 GROUP: tl.constexpr, D: tl.constexpr, DV: tl.constexpr, PAGE: tl.constexpr,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPAN: tl.constexpr,
                 SCORED: tl.constexpr, HND: tl.constexpr, TMA: tl.constexpr):  # fmt: skip
    """`_split_spans` on V columns dv0 .. dv0 + DV: spans j, j + S, ... (j = program_id(1)),
    each state stored at [req * max_spans + span] (m and l by the slice at column 0 only)."""
    r, live, tok, pos, lo, q, last, inner0, inner1, bt_row = _decode_rows(
        req, hk, q_ptr, pos_ptr, bt_ptr, bt_stride, window, HKV, GROUP, D, BLOCK_M, BLOCK_N
    )  # fmt: skip
    srow = _state_offsets(tok, hk, r, HKV, GROUP) * s_stride
    dv = dv0 + tl.arange(0, DV)
    for span in range(tl.program_id(1), last // SPAN + 1, tl.num_programs(1)):
        m_s, l_s, acc_s = _probe_span(q, k_ptr, v_ptr, s_ptr, srow, bt_row, span * SPAN, pos, lo,
                                      last, inner0, inner1, hk, qk_scale, dv0, HKV, D, DV, PAGE,
                                      BLOCK_M, BLOCK_N, SPAN, SCORED, HND, TMA)  # fmt: skip
        at = _state_offsets(tok * max_spans + span, hk, r, HKV, GROUP)
        tl.store(ms_ptr + at, m_s, mask=live & (dv0 == 0))
        tl.store(ls_ptr + at, l_s, mask=live & (dv0 == 0))
        tl.store(accs_ptr + at[:, None] * D + dv[None, :], acc_s, mask=live[:, None])


@triton.jit(do_not_specialize=["bt_stride", "max_spans", "window"])
def split_shape_kernel(q_ptr, k_ptr, v_ptr, ms_ptr, ls_ptr, accs_ptr, pos_ptr, bt_ptr, bt_stride,
                       max_spans, qk_scale, window, HKV: tl.constexpr, GROUP: tl.constexpr,
                       D: tl.constexpr, DV: tl.constexpr, PAGE: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPAN: tl.constexpr,
                       HND: tl.constexpr, TMA: tl.constexpr):  # fmt: skip
    """Program (kv head x D / DV slices, j, r): `split_span_kernel`'s spans j, j + S, ... of
    token r on V columns slice * DV .. + DV (the slice is the grid's fastest axis; DV = D:
    the shipped computation), from pages of [HKV, PAGE, D] where HND; TMA (DV = D): k_ptr /
    v_ptr are tensor descriptors, read as page boxes (`_probe_tile`)."""
    slices: tl.constexpr = D // DV
    hk, dv0 = tl.program_id(0) // slices, tl.program_id(0) % slices * DV
    _probe_spans(tl.program_id(2), hk, dv0, q_ptr, k_ptr, v_ptr, ms_ptr, 0, ms_ptr, ls_ptr,
                 accs_ptr, pos_ptr, bt_ptr, bt_stride, max_spans, qk_scale, window, HKV, GROUP, D,
                 DV, PAGE, BLOCK_M, BLOCK_N, SPAN, False, HND, TMA)  # fmt: skip


@triton.jit(do_not_specialize=["bt_stride", "s_stride", "window"])
def scores_kernel(q_ptr, k_ptr, s_ptr, s_stride, pos_ptr, bt_ptr, bt_stride, qk_scale, window,
                  HKV: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    """Program (kv head, key tile t, r): the scores of token r's GROUP rows against keys
    [t * BLOCK_N, + BLOCK_N) up to its position, stored at row * s_stride + key (fp32)."""
    hk, t, req = tl.program_id(0), tl.program_id(1), tl.program_id(2)
    r, live, tok, pos, lo, q, last, inner0, inner1, bt_row = _decode_rows(
        req, hk, q_ptr, pos_ptr, bt_ptr, bt_stride, window, HKV, GROUP, D, BLOCK_M, BLOCK_N
    )  # fmt: skip
    key = t * BLOCK_N + tl.arange(0, BLOCK_N)
    kmask = key <= last
    kv = _paged_rows(bt_row, key, kmask, hk, HKV, D, PAGE, True, False)
    s = _tile_scores(q, k_ptr, kv, kmask, qk_scale, D, True)
    srow = _state_offsets(tok, hk, r, HKV, GROUP) * s_stride
    tl.store(s_ptr + srow[:, None] + key[None, :], s, mask=live[:, None] & kmask[None, :])


@triton.jit(do_not_specialize=["bt_stride", "s_stride", "max_spans", "window"])
def split_scored_kernel(q_ptr, v_ptr, s_ptr, s_stride, ms_ptr, ls_ptr, accs_ptr, pos_ptr, bt_ptr,
                        bt_stride, max_spans, qk_scale, window, HKV: tl.constexpr,
                        GROUP: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                        SPAN: tl.constexpr):  # fmt: skip
    """Program (kv head, j, r): `split_span_kernel`'s spans of token r with the scores read
    from `scores_kernel`'s output (no K load, no QK MMA in the span's chain)."""
    _probe_spans(tl.program_id(2), tl.program_id(0), 0, q_ptr, v_ptr, v_ptr, s_ptr, s_stride,
                 ms_ptr, ls_ptr, accs_ptr, pos_ptr, bt_ptr, bt_stride, max_spans, qk_scale,
                 window, HKV, GROUP, D, D, PAGE, BLOCK_M, BLOCK_N, SPAN, True, False, 0)  # fmt: skip


# probe variants: (name, V columns a program (D: whole), scores first, HND pages, TMA boxes (0:
# none, 1: stacked into tiles, 2: box by box))
SHAPE_VARIANTS = [("dslice64", 64, False, False, 0), ("dslice32", 32, False, False, 0),
                  ("scored", 128, True, False, 0), ("hnd", 128, False, True, 0),
                  ("tma", 128, False, False, 1), ("tma_hnd", 128, False, True, 1),
                  ("tma_boxes", 128, False, False, 2), ("tma_boxes_hnd", 128, False, True, 2)]  # fmt: skip


def scores_stride(max_position: int, block_n: int) -> int:
    """Keys a scores row holds: the positions 0..max_position rounded up to whole tiles."""
    return -(-(max_position + 1) // block_n) * block_n


def launch_shape(variant: tuple, args: dict, scores, grid: tuple, opts: dict) -> None:
    """Run one `SHAPE_VARIANTS` launch: `args` the span kernel's tensors and scalars by name
    (q, k, v, k_hnd, v_hnd (HND only: `hnd_pages`), m_s, l_s, acc_s, pos, bt, max_spans, scale,
    window, max_position and the constexprs), `grid` the plan's (kv heads, programs a request,
    requests), `opts` its launch options; `scores` an fp32 buffer of requests x heads x
    `scores_stride` (scored only)."""
    _, dv, scored, hnd, tma = variant
    a = args
    facts = dict(HKV=grid[0], GROUP=a["group"], D=a["d"], PAGE=a["page"], BLOCK_M=a["block_m"],
                 BLOCK_N=a["block_n"], enable_fp_fusion=False)  # fmt: skip
    bt_stride = a["bt"].shape[1]
    if not scored:
        names = ("k_hnd", "v_hnd") if hnd else ("k", "v")
        k, v = (box_descriptor(a[n], hnd, a["page"]) if tma else a[n] for n in names)
        split_shape_kernel[(grid[0] * (a["d"] // dv), grid[1], grid[2])](
            a["q"], k, v, a["m_s"], a["l_s"], a["acc_s"], a["pos"], a["bt"], bt_stride,
            a["max_spans"], a["scale"], a["window"], DV=dv, SPAN=a["span"], HND=hnd, TMA=tma,
            **facts, **opts)  # fmt: skip
        return
    stride = scores_stride(a["max_position"], a["block_n"])
    scores_kernel[(grid[0], stride // a["block_n"], grid[2])](
        a["q"], a["k"], scores, stride, a["pos"], a["bt"], bt_stride, a["scale"], a["window"],
        **facts, num_warps=opts.get("num_warps", 4))  # fmt: skip
    split_scored_kernel[grid](
        a["q"], a["v"], scores, stride, a["m_s"], a["l_s"], a["acc_s"], a["pos"], a["bt"],
        bt_stride, a["max_spans"], a["scale"], a["window"], SPAN=a["span"], **facts, **opts)  # fmt: skip


def hnd_pages(cache, page: int):
    """A copy of a [slots, HKV, D] cache whose pages are [HKV, PAGE, D] (the same values)."""
    slots, hkv, d = cache.shape
    return cache.view(slots // page, page, hkv, d).transpose(1, 2).contiguous()


def box_descriptor(cache, hnd: bool, page: int):
    """A host tensor descriptor of [page, D] boxes over a cache: as rows of HKV * D (the plan's
    [slots, HKV, D] cache, NHD pages) or, `hnd`, as rows of D (a `hnd_pages` copy)."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    d = cache.shape[-1]
    rows = cache.view(-1, d) if hnd else cache.view(cache.shape[0], -1)
    return TensorDescriptor.from_tensor(rows, [page, d])
