"""Sliding-window attention inside the span definition (Gemma 3's local layers): the query at
position t sees keys lo..t, lo = max(0, t - W + 1), at absolute positions; span s runs over
[max(sS, lo), ...), spans wholly below lo are skipped. Bitwise: chunked prefill across window
and span edges equals the whole prefill, decode at the window's edges equals the prefill's
rows, the split launch equals the sequential one, window 0 (and a window wider than the
context) is full attention's bits; against a float64 reference of the windowed definition by
tolerance; a window of W and of W + 1 give other bits (so the comparisons can fail)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_attention_spans import BLOCK, DIM, HEADS, KV_HEADS, SCALE, Request, _ops

from samebits.bits import differing_rows, same_bits
from samebits.engine.runner import build_flat_batch
from samebits.engine.scheduler import ScheduledRequest
from samebits.kernels.cpu import attention as cpu_attention
from samebits.kernels.cpu import native, sbattn
from samebits.kernels.cpu.numba_env import numba
from samebits.kernels.cpu.ops import FastOps
from samebits.kernels.cpu.plan import KEY_TILE
from samebits.kernels.plan import ATTENTION_SPAN

KERNELS = ["sbattn", "numba"]


@pytest.fixture(params=KERNELS)
def kernel(request) -> str:
    if request.param == "sbattn" and not native.available():
        pytest.skip("no C compiler here")
    return request.param


def _attention(req: Request, ops, start: int, n: int, window: int) -> torch.Tensor:
    """Rows start..start+n-1 of `req` as one engine step computes them, windowed."""
    sched = [ScheduledRequest("a", (0,) * n, start, tuple(req.table), sample=True)]
    batch = ops.prepare_batch(build_flat_batch(sched, BLOCK))
    q = req.q[start : start + n].contiguous()
    return ops.attention(q, req.k, req.v, batch, SCALE, window=window)


def _kernel(req: Request, kernel: str, positions, span: int, window: int, threads: int = 1):
    pos = np.asarray(positions, dtype=np.int64)
    q = req.q[pos].contiguous()
    req_ids, tables = np.zeros(len(pos), np.int64), np.array([req.table], np.int64)
    out = torch.empty_like(q)
    if kernel == "sbattn":
        sbattn.paged_attention(
            q, req.k, req.v, pos, req_ids, tables, BLOCK, KEY_TILE, SCALE, out, threads,
            span=span, window=window,
        )  # fmt: skip
    else:
        cpu_attention.paged_attention(
            q.numpy(), req.k.numpy(), req.v.numpy(), pos, req_ids, tables, BLOCK, KEY_TILE,
            SCALE, out.numpy(), span, window,
        )  # fmt: skip
    return out


def reference_window(req: Request, positions, span: int, window: int) -> np.ndarray:
    """The windowed span definition in float64 numpy (a softmax per span, merged in order)."""
    pos = np.asarray(positions)
    slots = np.array([req.table[j // BLOCK] * BLOCK + j % BLOCK for j in range(pos.max() + 1)])
    group = HEADS // KV_HEADS
    k = req.k.numpy()[slots].astype(np.float64).repeat(group, axis=1)
    v = req.v.numpy()[slots].astype(np.float64).repeat(group, axis=1)
    out = np.empty((len(pos), HEADS, DIM))
    for i, t in enumerate(pos):
        lo = max(0, t - window + 1) if window else 0
        q = req.q.numpy()[t].astype(np.float64)
        m, den, acc = np.full(HEADS, -np.inf), np.zeros(HEADS), np.zeros((HEADS, DIM))
        for begin in range(lo // span * span, t + 1, span):
            first, end = max(begin, lo), min(begin + span, t + 1)
            scores = np.einsum("hd,jhd->hj", q, k[first:end]) * SCALE
            m_s = scores.max(axis=1)
            p = np.exp(scores - m_s[:, None])
            l_s, acc_s = p.sum(axis=1), np.einsum("hj,jhd->hd", p, v[first:end])
            m_new = np.maximum(m, m_s)
            a, b = np.exp(m - m_new), np.exp(m_s - m_new)
            den, acc = den * a + l_s * b, acc * a[:, None] + acc_s * b[:, None]
            m = m_new
        out[i] = acc / den[:, None]
    return out


def _softmax_reference(req: Request, positions, window: int) -> np.ndarray:
    """Plain float64 softmax attention over keys lo..t (no spans): the math itself."""
    out = np.empty((len(positions), HEADS, DIM))
    group = HEADS // KV_HEADS
    for i, t in enumerate(positions):
        lo = max(0, t - window + 1)
        keys = range(lo, t + 1)
        slots = [req.table[j // BLOCK] * BLOCK + j % BLOCK for j in keys]
        k = req.k.numpy()[slots].astype(np.float64).repeat(group, axis=1)
        v = req.v.numpy()[slots].astype(np.float64).repeat(group, axis=1)
        s = np.einsum("hd,jhd->hj", req.q.numpy()[t].astype(np.float64), k) * SCALE
        p = np.exp(s - s.max(axis=1, keepdims=True))
        out[i] = np.einsum("hj,jhd->hd", p / p.sum(axis=1, keepdims=True), v)
    return out


# Windows: inside one span, across a span edge, wider than a span, one key.
WINDOWS = [40, 100, 600, 1]


@pytest.mark.parametrize("window", WINDOWS)
def test_kernels_agree_with_windowed_reference(kernel, window):
    req, span = Request(1100, seed=21), 64
    positions = [0, 1, 39, 40, 41, 63, 64, 99, 100, 101, 127, 128, 600, 700, 1099]
    got = _kernel(req, kernel, positions, span, window, threads=2).numpy()
    tol = 2e-6 if kernel == "sbattn" else 1e-7
    np.testing.assert_allclose(got, reference_window(req, positions, span, window), tol, tol)
    np.testing.assert_allclose(got, _softmax_reference(req, positions, window), 5e-6, 5e-6)


@pytest.mark.parametrize("span", [64, ATTENTION_SPAN])
@pytest.mark.parametrize("window", [40, 100])
def test_chunked_prefill_across_window_edges_equals_whole_prefill(kernel, span, window):
    length = 2 * span + window + 30
    req, ops = Request(length, seed=span + window), _ops(kernel, span)
    whole = _attention(req, ops, 0, length, window)
    cuts = sorted({window - 1, window, window + 1, span + 3, span + window, length})
    cuts = [c for c in cuts if 0 < c <= length]
    plans = [[b - a for a, b in zip([0, *cuts], cuts, strict=False)]]
    plans += [[min(size, length - a) for a in range(0, length, size)] for size in (7, window)]
    for chunks in plans:
        starts = np.cumsum([0, *chunks])
        got = torch.cat([_attention(req, ops, int(a), int(b - a), window)
                         for a, b in zip(starts, starts[1:], strict=False)])  # fmt: skip
        assert same_bits(got, whole), (chunks, differing_rows(got, whole)[:5])


@pytest.mark.parametrize("window", [40, 100])
def test_decode_at_window_edges_equals_prefill_rows(kernel, window):
    span = 64
    req, ops = Request(3 * span + window + 9, seed=31), _ops(kernel, span)
    prefill = _attention(req, ops, 0, req.length, window)
    edges = [window - 2, window - 1, window, window + 1, span + window - 1, span + window,
             2 * span + window, req.length - 1]  # fmt: skip
    for p in edges:
        assert same_bits(_attention(req, ops, p, 1, window), prefill[p : p + 1]), p
    together = _kernel(req, kernel, edges, span, window, threads=2)
    assert same_bits(together, prefill[edges])


def test_window_zero_and_wide_windows_are_full_attention(kernel):
    req, span = Request(700, seed=41), 64
    positions = [0, 63, 64, 300, 699]
    full = _kernel(req, kernel, positions, span, 0)
    assert same_bits(_kernel(req, kernel, positions, span, 700), full)
    assert same_bits(_kernel(req, kernel, positions, span, 5000), full)
    # the window changes the bits of rows past it, not of rows inside it
    w = _kernel(req, kernel, positions, span, 100)
    assert same_bits(w[:3], full[:3])
    assert differing_rows(w, full) == [3, 4]
    w1 = _kernel(req, kernel, positions, span, 101)
    assert differing_rows(w, w1) == [3, 4]


def test_c_window_split_equals_sequential_launch(monkeypatch):
    if not native.available():
        pytest.skip("no C compiler here")
    lib = native.library()
    monkeypatch.setattr(sbattn, "PARALLEL_MIN_PAIRS", 0)
    req = Request(900, seed=51)
    try:
        for window in (40, 100, 300):
            for positions in ([899], [5, 899], [39, 40, 41, 400, 899], list(range(0, 900, 37))):
                results = []
                for mode in (0, 2, 1):
                    lib.sb_attention_set_split(mode)
                    for threads in (1, 4):
                        results.append(_kernel(req, "sbattn", positions, 64, window, threads))
                assert all(same_bits(r, results[0]) for r in results[1:]), (window, positions)
    finally:
        lib.sb_attention_set_split(1)


def test_numba_window_split_equals_sequential_launch(monkeypatch):
    req = Request(700, seed=52)
    threads = min(2, numba.config.NUMBA_NUM_THREADS)
    old = numba.get_num_threads()
    try:
        for positions in ([699], [39, 40, 41, 699]):
            results = []
            for split in ("never", "always"):
                monkeypatch.setattr(cpu_attention, "SPLIT", split)
                for min_work in (0, 1 << 62):
                    monkeypatch.setattr(cpu_attention, "PARALLEL_MIN_WORK", min_work)
                    for t in (1, threads):
                        numba.set_num_threads(t)
                        results.append(_kernel(req, "numba", positions, 64, 100))
            assert all(same_bits(r, results[0]) for r in results[1:]), positions
    finally:
        numba.set_num_threads(old)


def test_span_pairs_start_at_the_window():
    pos = np.array([10, 130, 700], dtype=np.int64)
    first, token, begin = cpu_attention.span_pairs(pos, 64, 100)
    # lo = 0, 31, 601: spans from 0, 0, 576 (= 9 * 64)
    assert first.tolist() == [0, 1, 4, 6]
    assert token.tolist() == [0, 1, 1, 1, 2, 2]
    assert begin.tolist() == [0, 0, 64, 128, 576, 640]


def test_fast_ops_sdpa_honours_the_window():
    req = Request(300, seed=61)
    ops = FastOps("cpu")
    got = _attention(req, ops, 0, 300, 40).numpy()
    ref = _softmax_reference(req, list(range(300)), 40)
    np.testing.assert_allclose(got, ref, 2e-5, 2e-5)


def test_a_negative_window_is_refused():
    req = Request(10, seed=71)
    for kernel in KERNELS if native.available() else ["numba"]:
        with pytest.raises(ValueError, match="window"):
            _kernel(req, kernel, [5], 64, -1)
