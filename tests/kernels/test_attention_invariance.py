"""Paged attention: the output for a query at position t is bitwise identical whether it is
computed in chunks of 1, 7 or 64 query tokens or with the whole prompt, with pages placed
differently, and with other sequences in the batch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from samebits.bits import same_bits
from samebits.engine.runner import build_flat_batch
from samebits.engine.scheduler import ScheduledRequest
from samebits.kernels.cpu import attention as cpu_attention
from samebits.kernels.cpu.ops import FastOps, InvariantOps
from samebits.kernels.cpu.plan import KEY_TILE, LINEAR_TILES

HEADS, KV_HEADS, HEAD_DIM, BLOCK, PROMPT = 9, 3, 64, 16, 100
NUM_BLOCKS = 40


def Sched(rid: str, start: int, n: int, table) -> ScheduledRequest:
    return ScheduledRequest(rid, (0,) * n, start, tuple(table), sample=True)


def _kv(tables: dict[str, list[int]], seed: int = 0):
    """A KV cache holding each request's per-position K/V (a function of (request, position))."""
    k = torch.zeros(NUM_BLOCKS * BLOCK, KV_HEADS, HEAD_DIM)
    v = torch.zeros_like(k)
    for name, table in tables.items():
        gen = torch.Generator().manual_seed(seed + sum(map(ord, name)))
        kk, vv = (
            torch.randn(PROMPT, KV_HEADS, HEAD_DIM, generator=gen),
            torch.randn(PROMPT, KV_HEADS, HEAD_DIM, generator=gen),
        )
        for p in range(PROMPT):
            slot = table[p // BLOCK] * BLOCK + p % BLOCK
            k[slot], v[slot] = kk[p], vv[p]
    return k, v


def _queries(name: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(1000 + sum(map(ord, name)))
    return torch.randn(PROMPT, HEADS, HEAD_DIM, generator=gen)


def run_chunks(ops, chunk: int, table, k, v, other=None) -> torch.Tensor:
    """Attention outputs for all PROMPT positions of request 'a', computed chunk by chunk."""
    q_all, outs = _queries("a"), []
    for start in range(0, PROMPT, chunk):
        n = min(chunk, PROMPT - start)
        sched, qs = [Sched("a", start, n, table)], [q_all[start : start + n]]
        if other is not None:  # another sequence in the same batch, placed before 'a'
            o_table, o_len = other
            sched.insert(0, Sched("b", o_len - 3, 3, o_table))
            qs.insert(0, _queries("b")[o_len - 3 : o_len])
        batch = build_flat_batch(sched, BLOCK)
        out = ops.attention(torch.cat(qs).contiguous(), k, v, batch, 0.125)
        outs.append(out[-n:])
    return torch.cat(outs)


TABLE_A = list(range(7))
TABLE_A_MOVED = [31, 2, 17, 9, 25, 11, 38]
TABLE_B = [20, 21, 22, 23, 24, 26, 27]


@pytest.fixture(scope="module", params=["sbattn", "numba"])
def ops(request):
    return InvariantOps(LINEAR_TILES, KEY_TILE, "mkl-tiles", 2, request.param)


def test_chunk_sizes_agree(ops):
    k, v = _kv({"a": TABLE_A})
    whole = run_chunks(ops, PROMPT, TABLE_A, k, v)
    for chunk in (1, 7, 64):
        assert same_bits(run_chunks(ops, chunk, TABLE_A, k, v), whole), f"chunk={chunk}"


def test_page_placement_and_batch_neighbours_agree(ops):
    k, v = _kv({"a": TABLE_A})
    whole = run_chunks(ops, PROMPT, TABLE_A, k, v)
    k2, v2 = _kv({"a": TABLE_A_MOVED, "b": TABLE_B})
    assert same_bits(run_chunks(ops, 7, TABLE_A_MOVED, k2, v2), whole)
    with_other = run_chunks(ops, 7, TABLE_A_MOVED, k2, v2, other=(TABLE_B, 90))
    assert same_bits(with_other, whole)


def test_matches_dense_softmax_attention(ops):
    k, v = _kv({"a": TABLE_A})
    got = run_chunks(ops, PROMPT, TABLE_A, k, v)
    q = _queries("a").transpose(0, 1).double()
    kk = k[:PROMPT].repeat_interleave(3, 1).transpose(0, 1).double()
    vv = v[:PROMPT].repeat_interleave(3, 1).transpose(0, 1).double()
    scores = (q @ kk.transpose(1, 2)) * 0.125
    scores = scores.masked_fill(torch.ones(PROMPT, PROMPT).triu(1).bool(), float("-inf"))
    ref = (scores.softmax(-1) @ vv).transpose(0, 1).float()
    assert (got - ref).abs().max().item() < 1e-5


def test_negative_control_fast_plan_is_not_invariant():
    """The stock-torch plan changes bits with the batch: the control that the tests can fail."""
    torch.set_num_threads(2)
    fast = FastOps()
    lin = fast.linear(torch.randn(1536, 576, generator=torch.Generator().manual_seed(0)), None)
    x = torch.randn(64, 576, generator=torch.Generator().manual_seed(1))
    whole = lin(x)
    singles = torch.cat([lin(x[r : r + 1]) for r in range(64)])
    assert not torch.equal(whole, singles)
    k, v = _kv({"a": TABLE_A})
    chunked = [run_chunks(fast, c, TABLE_A, k, v) for c in (1, 7, PROMPT)]
    attention_differs = any(not torch.equal(chunked[0], c) for c in chunked[1:])
    assert attention_differs or not torch.equal(whole, singles)
    np.testing.assert_allclose(chunked[0].numpy(), chunked[2].numpy(), atol=1e-5)


def test_serial_and_parallel_variants_agree(ops, monkeypatch):
    """The work-size switch between the serial and the threaded kernel never changes a bit."""
    k, v = _kv({"a": TABLE_A})
    monkeypatch.setattr(cpu_attention, "PARALLEL_MIN_WORK", 1 << 62)
    serial = run_chunks(ops, PROMPT, TABLE_A, k, v)
    monkeypatch.setattr(cpu_attention, "PARALLEL_MIN_WORK", 0)
    assert same_bits(run_chunks(ops, PROMPT, TABLE_A, k, v), serial)
    assert same_bits(run_chunks(ops, 7, TABLE_A, k, v), serial)


def test_native_attention_thread_split_invariant(monkeypatch):
    """The C kernel gives the same bits on 1 or 2 threads, whatever the item split."""
    from samebits.kernels.cpu import sbattn

    k, v = _kv({"a": TABLE_A})
    monkeypatch.setattr(sbattn, "PARALLEL_MIN_PAIRS", 0)
    one = run_chunks(
        InvariantOps(LINEAR_TILES, KEY_TILE, "mkl-tiles", 1, "sbattn"), 7, TABLE_A, k, v
    )
    two = run_chunks(
        InvariantOps(LINEAR_TILES, KEY_TILE, "mkl-tiles", 2, "sbattn"), 7, TABLE_A, k, v
    )
    assert same_bits(one, two)
