"""The span definition of attention (CPU interpreter, fp32): spans at absolute positions, each
an online softmax from a fresh state, folded in span order. Sequential-span prefill, chunked
prefill across span boundaries and split-KV decode (any number of programs per request) give
the same bits; the span length is part of the numerics (a different span changes bits)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from test_triton_attention import SCALE, assert_same, make_cache, make_request
from triton_bits import same_bits

from samebits.kernels.triton import attention
from samebits.kernels.triton.attention import (
    _split_decode,
    attention_metadata,
    decode_splits,
    paged_attention,
)

SPAN = 128  # two key tiles: many spans at interpreter-friendly lengths


def run(reqs, cache, chunks, span=SPAN, block_m=None) -> list[torch.Tensor]:
    """One step of ``chunks`` = [(request, first pos, end pos)] with key span ``span``."""
    q = torch.cat([reqs[r].q[a:b] for r, a, b in chunks]).contiguous()
    positions = np.concatenate([np.arange(a, b) for _, a, b in chunks])
    qsl = np.cumsum([0] + [b - a for _, a, b in chunks])
    tables = cache.tables[[r for r, _, _ in chunks]]
    group = q.shape[1] // reqs[0].k.shape[1]
    meta = attention_metadata(
        positions, qsl, tables, cache.block_size, group, "cpu", block_m, span=span
    )
    out = paged_attention(q, cache.k, cache.v, meta, SCALE)
    return [out[qsl[i] : qsl[i + 1]] for i in range(len(chunks))]


@pytest.fixture(scope="module")
def long_case():
    reqs = [make_request(300, 4, seed=70), make_request(140, 4, seed=71)]
    cache = make_cache(reqs, 16, seed=8)
    whole = [run(reqs, cache, [(r, 0, len(req.q))])[0] for r, req in enumerate(reqs)]
    return reqs, cache, whole


@pytest.mark.parametrize("chunk", [100, 127, 129])
def test_chunks_crossing_span_boundaries(long_case, chunk):
    reqs, cache, whole = long_case
    n = len(reqs[0].q)
    out = torch.cat([run(reqs, cache, [(0, a, min(n, a + chunk))])[0] for a in range(0, n, chunk)])
    assert_same(out, whole[0], f"chunk {chunk}")


def test_prefix_hit_ending_mid_span(long_case):
    """A cached prefix of 200 tokens (mid-way through span 1), then the rest in one chunk."""
    reqs, cache, whole = long_case
    assert_same(run(reqs, cache, [(0, 200, 300)])[0], whole[0][200:], "rows 200:300")


@pytest.mark.parametrize("position", [0, 127, 128, 129, 255, 256, 299])
def test_split_decode_equals_prefill_rows(long_case, position):
    """The decode launch the step chooses, and split-KV with 3 programs forced."""
    reqs, cache, whole = long_case
    ref = whole[0][position : position + 1]
    assert (decode_splits(_decode_meta(cache, [position]), 2) > 1) == (position >= SPAN)
    assert_same(run(reqs, cache, [(0, position, position + 1)])[0], ref, f"position {position}")
    out = torch.empty_like(ref)
    q = reqs[0].q[position : position + 1].contiguous()
    _split_decode(q, cache.k, cache.v, _decode_meta(cache, [position]), SCALE, 3, out)
    assert_same(out, ref, f"position {position}, 3 programs")


def test_split_decode_batch_and_program_count(long_case):
    """Two requests decoding at once, with 1 .. 5 programs per request: the same bits."""
    reqs, cache, whole = long_case
    steps = [(0, 257, 258), (1, 139, 140)]
    q = torch.cat([reqs[r].q[a:b] for r, a, b in steps]).contiguous()
    meta = _decode_meta(cache, [257, 139], requests=[0, 1])
    ref = torch.cat([whole[0][257:258], whole[1][139:140]])
    for splits in (1, 2, 3, 5):
        out = torch.empty_like(q)
        _split_decode(q, cache.k, cache.v, meta, SCALE, splits, out)
        assert_same(out, ref, f"{splits} programs per request")


def test_span_is_part_of_the_numerics(long_case):
    """Rows inside span 0 do not depend on the span length; rows past it do (for some rows):
    the span structure is really computed, and a merge that skipped it would be caught."""
    reqs, cache, _ = long_case
    a = run(reqs, cache, [(0, 0, 300)], span=SPAN)[0]
    b = run(reqs, cache, [(0, 0, 300)], span=512)[0]
    assert_same(a[:SPAN], b[:SPAN], "span 0")
    assert not same_bits(a[SPAN:], b[SPAN:])


def test_launch_choice():
    """Split-KV only for decode steps of few (request, KV head) pairs and more than one span."""
    cache = make_cache([make_request(8, 1, seed=0)], 16, seed=0)
    assert decode_splits(_decode_meta(cache, [SPAN - 1]), 2) == 0  # one span
    assert decode_splits(_decode_meta(cache, [4 * SPAN]), 2) == 5  # capped by the spans
    n = attention.DECODE_SPLIT_PROGRAMS // 2
    big = _decode_meta(cache, [4 * SPAN] * n, requests=[0] * n)
    assert decode_splits(big, 2) == 0  # enough (request, KV head) pairs fill the GPU already
    assert (
        decode_splits(_decode_meta(cache, [4 * SPAN] * (n // 2), requests=[0] * (n // 2)), 2) == 2
    )
    assert attention.DECODE_SPLIT_PROGRAMS >= 132
    tall = dataclasses.replace(_decode_meta(cache, [4 * SPAN]), block_m=32)
    assert decode_splits(tall, 2) == 0  # split-KV only at the decode tile height


def _decode_meta(cache, positions, requests=None):
    requests = requests or [0] * len(positions)
    qsl = np.arange(len(positions) + 1)
    tables = cache.tables[requests]
    # a table row wide enough for the positions (the metadata check's precondition); only
    # the launch choice is tested here, no kernel reads the pages
    width = max(positions) // cache.block_size + 1
    tables = np.pad(tables, ((0, 0), (0, max(width - tables.shape[1], 0))))
    return attention_metadata(
        np.array(positions), qsl, tables, cache.block_size, 4, "cpu", span=SPAN
    )
