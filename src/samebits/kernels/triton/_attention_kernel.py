"""Triton kernel of paged causal attention (prefill, chunked prefill, decode, mixed steps).

Invariant: a query row at absolute position t reduces keys 0..t in key tiles of BLOCK_N aligned
to absolute positions 0, BLOCK_N, 2*BLOCK_N, ... with an online softmax in tile order. Scores
and P@V are ``tl.dot`` (fp32 accumulate); the softmax denominator is also an MMA
(``p @ ones``, one column kept), never a ``tl.sum`` over the tile, because the tile height
(BLOCK_M) and the row -> (token, head) packing change between launches. ``tl.max`` is exact.
A row whose position is below a tile's first key keeps its state through ``tl.where``, so the
extra tiles that a program runs for its later rows never touch it.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _attend_tile(q, k_ptr, v_ptr, bt_row, key0, pos, last, hk, qk_scale, m_i, l_i, acc,
                 HKV: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr,
                 BLOCK_N: tl.constexpr):  # fmt: skip
    """One key tile [key0, key0 + BLOCK_N): the online-softmax update, guarded per row."""
    d = tl.arange(0, D)
    key = key0 + tl.arange(0, BLOCK_N)
    kmask = key <= last
    page = tl.load(bt_row + key // PAGE, mask=kmask, other=0).to(tl.int64)
    kv = ((page * PAGE + key % PAGE) * HKV + hk) * D
    k = tl.load(k_ptr + kv[:, None] + d[None, :], mask=kmask[:, None], other=0.0)
    v = tl.load(v_ptr + kv[:, None] + d[None, :], mask=kmask[:, None], other=0.0)
    s = tl.dot(q, tl.trans(k), input_precision="ieee") * qk_scale
    s = tl.where(key[None, :] <= pos[:, None], s, float("-inf"))
    active = key0 <= pos
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(tl.where(active, m_i - m_new, 0.0))
    p = tl.where(active[:, None], tl.exp2(s - m_new[:, None]), 0.0).to(v.dtype)
    ones = tl.full((BLOCK_N, 16), 1.0, v.dtype)
    col0 = tl.arange(0, 16)[None, :] == 0
    row_sum = tl.sum(tl.where(col0, tl.dot(p, ones, input_precision="ieee"), 0.0), axis=1)
    l_new = l_i * alpha + row_sum
    acc_new = acc * alpha[:, None] + tl.dot(p, v, input_precision="ieee")
    m_i = tl.where(active, m_new, m_i)
    l_i = tl.where(active, l_new, l_i)
    acc = tl.where(active[:, None], acc_new, acc)
    return m_i, l_i, acc


@triton.jit(do_not_specialize=["bt_stride"])
def paged_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, pos_ptr, req_ptr, row0_ptr, qend_ptr,
                           bt_ptr, bt_stride, qk_scale, HKV: tl.constexpr, GROUP: tl.constexpr,
                           D: tl.constexpr, PAGE: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr):  # fmt: skip
    """Program (tile of query tokens of one request, kv head): rows are (token, head) pairs."""
    pid = tl.program_id(0)
    hk = tl.program_id(1)
    req = tl.load(req_ptr + pid)
    r = tl.arange(0, BLOCK_M)
    tok = tl.load(row0_ptr + pid) + r // GROUP
    live = (r < (BLOCK_M // GROUP) * GROUP) & (tok < tl.load(qend_ptr + req))
    pos = tl.load(pos_ptr + tok, mask=live, other=-1)
    d = tl.arange(0, D)
    rows = (tok.to(tl.int64) * (HKV * GROUP) + hk * GROUP + r % GROUP) * D
    q = tl.load(q_ptr + rows[:, None] + d[None, :], mask=live[:, None], other=0.0)
    last = tl.max(pos, axis=0)
    bt_row = bt_ptr + req.to(tl.int64) * bt_stride
    m_i = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    l_i = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, D), tl.float32)
    for j in range(0, last // BLOCK_N + 1):
        m_i, l_i, acc = _attend_tile(q, k_ptr, v_ptr, bt_row, j * BLOCK_N, pos, last, hk,
                                     qk_scale, m_i, l_i, acc, HKV, D, PAGE, BLOCK_N)  # fmt: skip
    out = tl.math.div_rn(acc, l_i[:, None])
    tl.store(o_ptr + rows[:, None] + d[None, :], out.to(o_ptr.dtype.element_ty), mask=live[:, None])
