"""The span definition of attention (KernelPlan.attention_span, S): keys cut into spans at
absolute positions 0, S, 2S, ..., each an online softmax from a fresh state, merged in span
order by one formula. Bitwise: chunked prefill across span boundaries equals the whole
prefill, decode at span boundaries equals the prefill's rows, the threaded span split equals
the sequential launch; the kernels' own span states folded in span order give their output
bits, and other orders / a single chain give other bits (so these comparisons can fail).
Tolerance only against the float64 reference of the definition."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from samebits.bits import differing_rows, same_bits
from samebits.engine.runner import build_flat_batch
from samebits.engine.scheduler import ScheduledRequest
from samebits.kernels.cpu import attention as cpu_attention
from samebits.kernels.cpu import native, sbattn
from samebits.kernels.cpu.numba_env import numba
from samebits.kernels.cpu.ops import InvariantOps
from samebits.kernels.cpu.plan import KEY_TILE, LINEAR_TILES
from samebits.kernels.plan import ATTENTION_SPAN

HEADS, KV_HEADS, DIM, BLOCK, SCALE = 9, 3, 64, 16, 0.125
ONE_CHAIN = 1 << 20  # a span longer than any context: the single-chain work pattern
KERNELS = ["sbattn", "numba"]


class Request:
    """One request of `length` positions: its queries and K/V in pages out of order."""

    def __init__(self, length: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        blocks = -(-length // BLOCK)
        self.table = [int(b) for b in rng.permutation(blocks + 5)[:blocks]]
        slots = (blocks + 5) * BLOCK
        self.k = torch.from_numpy(rng.standard_normal((slots, KV_HEADS, DIM), np.float32) * 2)
        self.v = torch.from_numpy(rng.standard_normal((slots, KV_HEADS, DIM), np.float32))
        self.q = torch.from_numpy(rng.standard_normal((length, HEADS, DIM), np.float32))
        self.length = length

    def attention(self, ops: InvariantOps, start: int, n: int) -> torch.Tensor:
        """Rows start..start+n-1 as one step of the engine would compute them."""
        sched = [ScheduledRequest("a", (0,) * n, start, tuple(self.table), sample=True)]
        batch = ops.prepare_batch(build_flat_batch(sched, BLOCK))
        return ops.attention(self.q[start : start + n].contiguous(), self.k, self.v, batch, SCALE)

    def chunked(self, ops: InvariantOps, chunks: list[int]) -> torch.Tensor:
        starts = np.cumsum([0, *chunks])
        assert starts[-1] == self.length
        return torch.cat(
            [
                self.attention(ops, int(a), int(b - a))
                for a, b in zip(starts, starts[1:], strict=False)
            ]
        )

    def kernel(self, kernel: str, positions, span: int, threads: int = 1) -> torch.Tensor:
        """The kernel called directly on the queries at `positions` (one request)."""
        pos = np.asarray(positions, dtype=np.int64)
        q = self.q[pos].contiguous()
        req, tables = np.zeros(len(pos), np.int64), np.array([self.table], np.int64)
        out = torch.empty_like(q)
        if kernel == "sbattn":
            sbattn.paged_attention(
                q, self.k, self.v, pos, req, tables, BLOCK, KEY_TILE, SCALE, out, threads,
                span=span,
            )  # fmt: skip
        else:
            cpu_attention.paged_attention(
                q.numpy(), self.k.numpy(), self.v.numpy(), pos, req, tables, BLOCK, KEY_TILE,
                SCALE, out.numpy(), span,
            )  # fmt: skip
        return out


def _ops(kernel: str, span: int, threads: int = 2) -> InvariantOps:
    return InvariantOps(LINEAR_TILES, KEY_TILE, "mkl-tiles", threads, kernel, span)


@pytest.fixture(params=KERNELS)
def kernel(request) -> str:
    if request.param == "sbattn" and not native.available():
        pytest.skip("no C compiler here")
    return request.param


@pytest.fixture
def c_split_mode():
    """sb_attention_set_split, restored to "when it pays" afterwards."""
    lib = native.library()
    yield lib.sb_attention_set_split
    lib.sb_attention_set_split(1)


def _chunk_plans(span: int, length: int) -> list[list[int]]:
    """Chunkings whose boundaries cross span boundaries and whose prefixes end mid-span."""
    cuts = [span // 2 + 3, span + 1, 2 * span - 1, 2 * span + span // 3]
    cuts = sorted({c for c in cuts if c < length} | {length})
    irregular = [b - a for a, b in zip([0, *cuts], cuts, strict=False)]
    plans = [irregular]
    for size in (span - 5, span + 7, 3 * span // 2):
        plans.append([min(size, length - a) for a in range(0, length, size)])
    return plans


@pytest.mark.parametrize("span", [64, ATTENTION_SPAN])
def test_chunked_prefill_across_spans_equals_whole_prefill(kernel, span):
    length = 3 * span + 40
    req, ops = Request(length, seed=span), _ops(kernel, span)
    whole = req.attention(ops, 0, length)
    for chunks in _chunk_plans(span, length):
        got = req.chunked(ops, chunks)
        assert same_bits(got, whole), (chunks, differing_rows(got, whole)[:5])


@pytest.mark.parametrize("span", [64, ATTENTION_SPAN])
def test_decode_at_span_boundaries_equals_prefill_rows(kernel, span):
    positions = [span - 1, span, span + 1, 3 * span + 7]
    req, ops = Request(3 * span + 8, seed=1 + span), _ops(kernel, span)
    prefill = req.attention(ops, 0, req.length)
    for p in positions:  # one decode step per position: a batch of one token
        assert same_bits(req.attention(ops, p, 1), prefill[p : p + 1]), p
    together = req.kernel(kernel, positions, span, threads=2)
    assert same_bits(together, prefill[positions])


def test_c_span_split_equals_sequential_launch(c_split_mode, monkeypatch):
    """Threads 1 and 4, the split launch forced off, on, or chosen: the same bits."""
    monkeypatch.setattr(sbattn, "PARALLEL_MIN_PAIRS", 0)
    req = Request(900, seed=7)
    for positions in ([899], [5, 899], [63, 64, 65, 400, 899], list(range(0, 900, 37))):
        results = {}
        for span in (64, 128):
            for mode in (0, 2, 1):
                c_split_mode(mode)
                for threads in (1, 4):
                    results[span, mode, threads] = req.kernel("sbattn", positions, span, threads)
        for span in (64, 128):
            base = results[span, 0, 1]
            for key, got in results.items():
                if key[0] == span:
                    assert same_bits(got, base), (positions, key)
        assert not same_bits(results[64, 0, 1], results[128, 0, 1])  # the span matters


def test_numba_span_split_equals_sequential_launch(monkeypatch):
    req = Request(700, seed=8)
    threads = min(2, numba.config.NUMBA_NUM_THREADS)
    old = numba.get_num_threads()
    try:
        for positions in ([699], [63, 64, 65, 699]):
            results = []
            for split in ("never", "always", "auto"):
                monkeypatch.setattr(cpu_attention, "SPLIT", split)
                for min_work in (0, 1 << 62):  # the parallel and the serial compilation
                    monkeypatch.setattr(cpu_attention, "PARALLEL_MIN_WORK", min_work)
                    for t in (1, threads):
                        numba.set_num_threads(t)
                        results.append(req.kernel("numba", positions, 64))
            assert all(same_bits(r, results[0]) for r in results[1:]), positions
    finally:
        numba.set_num_threads(old)


def reference_float64(req: Request, positions, span: int) -> np.ndarray:
    """The span definition in float64 numpy: per span m, l, acc from its scores (a softmax
    computed at once), merged in span order with the formula."""
    pos = np.asarray(positions)
    slots = np.array([req.table[j // BLOCK] * BLOCK + j % BLOCK for j in range(pos.max() + 1)])
    group = HEADS // KV_HEADS
    k = req.k.numpy()[slots].astype(np.float64).repeat(group, axis=1)  # [keys, H, D]
    v = req.v.numpy()[slots].astype(np.float64).repeat(group, axis=1)
    out = np.empty((len(pos), HEADS, DIM))
    for i, t in enumerate(pos):
        q = req.q.numpy()[t].astype(np.float64)
        m, den, acc = np.full(HEADS, -np.inf), np.zeros(HEADS), np.zeros((HEADS, DIM))
        for begin in range(0, t + 1, span):
            end = min(begin + span, t + 1)
            scores = np.einsum("hd,jhd->hj", q, k[begin:end]) * SCALE
            m_s = scores.max(axis=1)
            p = np.exp(scores - m_s[:, None])
            l_s, acc_s = p.sum(axis=1), np.einsum("hj,jhd->hd", p, v[begin:end])
            m_new = np.maximum(m, m_s)
            a, b = np.exp(m - m_new), np.exp(m_s - m_new)
            den, acc = den * a + l_s * b, acc * a[:, None] + acc_s * b[:, None]
            m = m_new
        out[i] = acc / den[:, None]
    return out


@pytest.mark.parametrize("span", [64, ATTENTION_SPAN])
def test_kernels_agree_with_float64_reference(kernel, span):
    req = Request(1100, seed=9)
    positions = [0, 31, 63, 64, 65, 511, 512, 513, 1099]
    got = req.kernel(kernel, positions, span, threads=2).numpy()
    ref = reference_float64(req, positions, span)
    tol = 2e-6 if kernel == "sbattn" else 1e-7
    np.testing.assert_allclose(got, ref, atol=tol, rtol=tol)


# --- the kernels' own span states, folded by hand ----------------------------------------


def _c_states(req: Request, positions, span: int) -> tuple[np.ndarray, np.ndarray]:
    """(first_pair, states [pairs, H, D + 16]) from sb_attention_states."""
    pos = np.asarray(positions, dtype=np.int64)
    first_pair, _, _ = cpu_attention.span_pairs(pos, span)
    q = req.q[pos].contiguous()
    states = np.empty((first_pair[-1], HEADS, DIM + 16), dtype=np.float32)
    req_ids, tables = np.zeros(len(pos), np.int64), np.array([req.table], np.int64)
    got = native.library().sb_attention_states(
        q.data_ptr(), HEADS, DIM, req.k.data_ptr(), req.v.data_ptr(), KV_HEADS, pos.ctypes.data,
        req_ids.ctypes.data, tables.ctypes.data, tables.shape[1], BLOCK, KEY_TILE, span, SCALE,
        states.ctypes.data, len(pos), len(states),
    )  # fmt: skip
    assert got == len(states)
    return first_pair, states


def _exp32(x: np.ndarray) -> np.ndarray:
    """The kernel's scalar exp (sb_exp) elementwise."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    out = np.empty_like(x)
    native.library().sb_attention_exp(x.ctypes.data, x.size, out.ctypes.data)
    return out


def fold32(states: np.ndarray, order) -> np.ndarray:
    """The merge formula in float32 numpy (each product and sum rounded on its own) over the
    span states [spans, H, D + 16] of one query, taken in `order`; returns ACC / L."""
    m, den = np.full(HEADS, -np.inf, np.float32), np.zeros(HEADS, np.float32)
    acc = np.zeros((HEADS, DIM), np.float32)
    with np.errstate(invalid="ignore"):
        for s in order:
            m_s, l_s, acc_s = states[s, :, DIM], states[s, :, DIM + 1], states[s, :, :DIM]
            m_new = np.where(m_s > m, m_s, m)
            a, b = _exp32(m - m_new), _exp32(m_s - m_new)
            den = den * a + l_s * b
            acc = acc * a[:, None] + acc_s * b[:, None]
            m = m_new
    return acc / den[:, None]


def _folds(first_pair, states, fold, reverse: bool = False) -> np.ndarray:
    rows = []
    for n in range(len(first_pair) - 1):
        spans = states[first_pair[n] : first_pair[n + 1]]
        order = range(len(spans) - 1, -1, -1) if reverse else range(len(spans))
        rows.append(fold(spans, order))
    return np.stack(rows)


@pytest.mark.skipif(not native.available(), reason="no C compiler here")
def test_c_output_is_the_in_order_fold_of_fresh_span_states(c_split_mode, monkeypatch):
    monkeypatch.setattr(sbattn, "PARALLEL_MIN_PAIRS", 0)
    req, span = Request(700, seed=10), 64
    positions = [0, 63, 64, 65, 300, 699]
    first_pair, states = _c_states(req, positions, span)
    in_order = _folds(first_pair, states, fold32)
    for mode in (0, 2):  # the sequential and the split launch
        c_split_mode(mode)
        assert same_bits(req.kernel("sbattn", positions, span, threads=2).numpy(), in_order)
    # The comparison can fail: a reversed merge, or one chain over all tiles (each span
    # starting from the previous span's state), gives other bits for multi-span rows.
    reversed_ = _folds(first_pair, states, fold32, reverse=True)
    assert differing_rows(reversed_, in_order)
    assert same_bits(reversed_[:2], in_order[:2])  # rows of one span: the order is moot
    chain = req.kernel("sbattn", positions, ONE_CHAIN).numpy()
    assert set(differing_rows(chain, in_order)) - {0, 1}
    assert same_bits(chain[:2], in_order[:2])  # one span: the chain is the definition


def fold64(acc_s: np.ndarray, m_s: np.ndarray, l_s: np.ndarray, order) -> np.ndarray:
    """The merge formula in Python floats (float64, libm exp) for one (query, head)."""
    m, den, acc = -math.inf, 0.0, np.zeros(acc_s.shape[1])
    for s in order:
        m_new = m_s[s] if m_s[s] > m else m
        a, b = math.exp(m - m_new), math.exp(m_s[s] - m_new)
        den = den * a + l_s[s] * b
        acc = np.array([acc[c] * a + acc_s[s, c] * b for c in range(len(acc))])
        m = m_new
    return acc / den


def _numba64(req: Request, positions: np.ndarray, span: int, split: bool) -> np.ndarray:
    """The numba kernel's float64 result before its float32 store (the same loops, compiled
    for a float64 output): the float32 cast would hide most differences of merge order."""
    args = (req.q[positions].numpy(), req.k.numpy(), req.v.numpy(), positions)
    args += (np.zeros(len(positions), np.int64), np.array([req.table], np.int64), BLOCK)
    out = np.empty((len(positions), HEADS, DIM))
    if split:
        first_pair, acc_s, m_s, l_s = cpu_attention.span_states(*args, KEY_TILE, span, SCALE)
        cpu_attention._merge_serial(first_pair, acc_s, m_s, l_s, out)
    else:
        cpu_attention._serial(*args, KEY_TILE, span, SCALE, 0, out)
    return out


def test_numba_output_is_the_in_order_fold_of_fresh_span_states():
    req, span = Request(400, seed=11), 64
    positions = np.array([10, 64, 200, 399], dtype=np.int64)
    args = (req.q[positions].numpy(), req.k.numpy(), req.v.numpy(), positions)
    tables = (np.zeros(4, np.int64), np.array([req.table], np.int64), BLOCK, KEY_TILE, span)
    first_pair, acc_s, m_s, l_s = cpu_attention.span_states(*args, *tables, SCALE)
    in_order = np.empty((len(positions), HEADS, DIM))
    reverse = np.empty_like(in_order)
    for n in range(len(positions)):
        units = np.arange(first_pair[n], first_pair[n + 1]) * HEADS
        for h in range(HEADS):
            u = units + h
            spans = len(u)
            in_order[n, h] = fold64(acc_s[u], m_s[u], l_s[u], range(spans))
            reverse[n, h] = fold64(acc_s[u], m_s[u], l_s[u], range(spans - 1, -1, -1))
    for split in (False, True):
        assert same_bits(_numba64(req, positions, span, split), in_order)
    assert same_bits(req.kernel("numba", positions, span).numpy(), in_order.astype(np.float32))
    # The comparison can fail: a reversed merge or a single chain gives other float64 bits.
    assert set(differing_rows(reverse, in_order)) - {0}
    assert set(differing_rows(_numba64(req, positions, ONE_CHAIN, False), in_order)) - {0}


def test_a_span_must_be_a_multiple_of_the_key_tile():
    with pytest.raises(ValueError, match="multiple"):
        _ops("numba", KEY_TILE + 16)
    if native.available():
        assert sbattn.supports(DIM, 3, KEY_TILE, ATTENTION_SPAN)
        assert not sbattn.supports(DIM, 3, KEY_TILE, KEY_TILE + 16)
        assert not sbattn.supports(DIM, 3, KEY_TILE, KEY_TILE // 2)
