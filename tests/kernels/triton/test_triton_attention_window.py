"""Sliding-window attention in the Triton kernels (CPU interpreter, fp32): the query at t sees
keys max(t - W + 1, 0)..t. Against a float64 masked softmax by tolerance; bitwise: chunked
prefill across window and span edges equals the whole prefill, decode (spans in sequence and
split-KV with any number of programs) equals the prefill's rows, tile height and page
placement do not matter; window 0 is full attention's bits, a window above every position
too; rows inside the window are unchanged and rows past it differ (so these can fail)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_triton_attention import SCALE, assert_same, make_cache, make_request
from triton_bits import differing_rows, same_bits

from samebits.kernels.replay.ex2q import MAX_REL_ERROR
from samebits.kernels.triton.attention import (
    FULL_WINDOW,
    _split_decode,
    attention_metadata,
    paged_attention,
)

SPAN = 128  # two key tiles


def run(reqs, cache, chunks, window, block_m=None) -> list[torch.Tensor]:
    q = torch.cat([reqs[r].q[a:b] for r, a, b in chunks]).contiguous()
    positions = np.concatenate([np.arange(a, b) for _, a, b in chunks])
    qsl = np.cumsum([0] + [b - a for _, a, b in chunks])
    tables = cache.tables[[r for r, _, _ in chunks]]
    group = q.shape[1] // reqs[0].k.shape[1]
    meta = attention_metadata(
        positions, qsl, tables, cache.block_size, group, "cpu", block_m, span=SPAN
    )
    out = paged_attention(q, cache.k, cache.v, meta, SCALE, window)
    return [out[qsl[i] : qsl[i + 1]] for i in range(len(chunks))]


def reference(req, window: int) -> torch.Tensor:
    group = req.q.shape[1] // req.k.shape[1]
    q = req.q.double()
    k = req.k.double().repeat_interleave(group, dim=1)
    v = req.v.double().repeat_interleave(group, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) * SCALE
    t = torch.arange(q.shape[0])
    visible = (t[None, :] <= t[:, None]) & (t[None, :] > t[:, None] - window)
    s = s.masked_fill(~visible, float("-inf"))
    return torch.einsum("hts,shd->thd", s.softmax(-1), v)


@pytest.fixture(scope="module")
def case():
    reqs = [make_request(300, 4, seed=80), make_request(90, 4, seed=81)]
    cache = make_cache(reqs, 16, seed=9)
    return reqs, cache


WINDOWS = [50, 130]  # inside a span; wider than a span (three spans, one skipped late on)


@pytest.fixture(scope="module", params=WINDOWS)
def windowed(request, case):
    reqs, cache = case
    w = request.param
    return w, [run(reqs, cache, [(r, 0, len(req.q))], w)[0] for r, req in enumerate(reqs)]


def test_agrees_with_masked_softmax(case, windowed):
    reqs, _ = case
    w, whole = windowed
    for req, out in zip(reqs, whole, strict=True):
        tol = 2 * MAX_REL_ERROR * float(req.v.abs().max()) + 2e-5  # ex2q's weights, fp32
        torch.testing.assert_close(out.double(), reference(req, w), atol=tol, rtol=2e-5)


@pytest.mark.parametrize("chunk", [7, 49, 51, 129])
def test_chunked_prefill_across_window_edges(case, windowed, chunk):
    reqs, cache = case
    w, whole = windowed
    n = len(reqs[0].q)
    out = torch.cat(
        [run(reqs, cache, [(0, a, min(n, a + chunk))], w)[0] for a in range(0, n, chunk)]
    )
    assert_same(out, whole[0], f"window {w} chunk {chunk}")


def test_mixed_batch_and_tile_height(case, windowed):
    reqs, cache = case
    w, whole = windowed
    step = [(1, 89, 90), (0, 40, 200), (1, 0, 60)]
    for (r, a, b), out in zip(step, run(reqs, cache, step, w), strict=True):
        assert_same(out, whole[r][a:b], f"request {r} rows {a}:{b}")
    for block_m in (16, 32, 128):
        assert_same(run(reqs, cache, [(0, 0, 300)], w, block_m)[0], whole[0], f"bm {block_m}")
    other = make_cache(reqs, 32, seed=10)
    assert_same(run(reqs, other, [(0, 0, 300)], w)[0], whole[0], "page 32")


@pytest.mark.parametrize("position", [49, 50, 51, 127, 128, 179, 180, 258, 299])
def test_decode_equals_prefill_rows(case, windowed, position):
    """Spans in sequence, and split-KV with 1, 2 and 3 programs per request (a span wholly
    below the window: its state is never merged)."""
    reqs, cache = case
    w, whole = windowed
    ref = whole[0][position : position + 1]
    assert_same(run(reqs, cache, [(0, position, position + 1)], w)[0], ref, f"pos {position}")
    q = reqs[0].q[position : position + 1].contiguous()
    meta = attention_metadata(
        np.array([position]), np.arange(2), cache.tables[[0]], cache.block_size, 4, "cpu",
        span=SPAN,
    )  # fmt: skip
    for splits in (1, 2, 3):
        out = torch.empty_like(ref)
        _split_decode(q, cache.k, cache.v, meta, SCALE, splits, out, w)
        assert_same(out, ref, f"pos {position}, {splits} programs")


def test_window_zero_is_full_attention(case):
    reqs, cache = case
    full = run(reqs, cache, [(0, 0, 300)], 0)[0]
    big = run(reqs, cache, [(0, 0, 300)], FULL_WINDOW - 1)[0]
    assert_same(big, full, "a window above every position")
    w = run(reqs, cache, [(0, 0, 300)], 50)[0]
    assert_same(w[:50], full[:50], "rows inside the window")
    bad = differing_rows(w, full)
    assert bad and min(bad) >= 50
    assert not same_bits(w[50:], run(reqs, cache, [(0, 0, 300)], 51)[0][50:])


def test_bad_window_is_refused(case):
    reqs, cache = case
    with pytest.raises(ValueError, match="window"):
        run(reqs, cache, [(0, 0, 4)], -1)
