"""Batch-invariant paged attention (numba), the span definition in float64.

Definition (S = the plan's `attention_span`, T = its key tile, S a multiple of T): for the
query of token n, head h at position t, keys 0..t of its own request are read through
`block_tables` and cut into spans at absolute positions 0, S, 2S, .... Span s is an online
softmax over its key tiles [sS + iT, ...) in order, from a fresh state (m = -inf, l = 0,
acc = 0), all in float64 (`math.exp`); the span states (m_s, l_s, acc_s) are merged in span
order from the empty state by one formula, each product and sum rounded on its own (no fused
multiply-add: `fastmath=False`), also when there is a single span:
    M' = max(M, m_s); a = exp(M - M'); b = exp(m_s - M'); L = L*a + l_s*b; ACC = ACC*a + acc_s*b
and out = float32(ACC / L). A sliding window of W keys (W = 0: full attention) keeps keys
lo..t, lo = max(0, t - W + 1), at absolute positions: span s runs over [max(sS, lo),
min(sS + S, t + 1)) (its tiles from its first key) and spans wholly below lo are no part of the
merge (with W = 0, or t < W, exactly the full definition). The operations and their order depend only on t, S, T and the
values — never on how many queries are in the batch, which requests they belong to, where
pages sit, or the thread count. Prefill, chunked prefill and decode are the same code path;
a call with too few (token, head) items for the threads (a long-context decode) runs its
(token, head, span) units in parallel and merges their states in span order: the same bits.
"""

from __future__ import annotations

import math

import numpy as np

from samebits.kernels.cpu.numba_env import numba


@numba.njit(cache=True, fastmath=False, inline="always")
def _dot(q: np.ndarray, k: np.ndarray) -> float:
    """Dot product over head_dim in float64 with a fixed 4-lane order."""
    d = q.shape[0]
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    i = 0
    while i + 4 <= d:
        s0 += float(q[i]) * float(k[i])
        s1 += float(q[i + 1]) * float(k[i + 1])
        s2 += float(q[i + 2]) * float(k[i + 2])
        s3 += float(q[i + 3]) * float(k[i + 3])
        i += 4
    while i < d:
        s0 += float(q[i]) * float(k[i])
        i += 1
    return (s0 + s1) + (s2 + s3)


@numba.njit(cache=True, fastmath=False)
def _span_state(q, k_cache, v_cache, table, begin, end, kvh, block_size, key_tile, scale, acc):
    """(m, l) of one query row over keys [begin, end) from a fresh state; its accumulator
    into `acc` (float64 [D])."""
    d = q.shape[0]
    acc[:] = 0.0
    scores = np.empty(key_tile, dtype=np.float64)
    m = -np.inf
    denom = 0.0
    for start in range(begin, end, key_tile):
        stop = min(start + key_tile, end)
        m_tile = -np.inf
        for j in range(start, stop):
            slot = table[j // block_size] * block_size + j % block_size
            s = _dot(q, k_cache[slot, kvh]) * scale
            scores[j - start] = s
            m_tile = max(m_tile, s)
        m_new = max(m, m_tile)
        alpha = math.exp(m - m_new)
        denom *= alpha
        for c in range(d):
            acc[c] *= alpha
        for j in range(start, stop):
            slot = table[j // block_size] * block_size + j % block_size
            p = math.exp(scores[j - start] - m_new)
            denom += p
            v = v_cache[slot, kvh]
            for c in range(d):
                acc[c] += p * float(v[c])
        m = m_new
    return m, denom


@numba.njit(cache=True, fastmath=False, inline="always")
def _merge(m, denom, acc, m_s, l_s, acc_s):
    """The span merge: acc <- acc*a + acc_s*b in place; returns (M', L') (module doc)."""
    m_new = m_s if m_s > m else m
    a = math.exp(m - m_new)
    b = math.exp(m_s - m_new)
    for c in range(acc.shape[0]):
        acc[c] = acc[c] * a + acc_s[c] * b
    return m_new, denom * a + l_s * b


@numba.njit(cache=True, inline="always")
def first_key(t: int, window: int) -> int:
    """lo: the first key of a query at position t (0 without a window)."""
    return max(0, t - window + 1) if window > 0 else 0


@numba.njit(cache=True, fastmath=False)
def _attend_one(
    q, k_cache, v_cache, table, t, kvh, block_size, key_tile, span, scale, window, out
):  # fmt: skip
    """One query row (one head) over positions lo..t: its spans in order, each merged into
    the running state as soon as it is done."""
    d = q.shape[0]
    acc = np.zeros(d, dtype=np.float64)
    part = np.empty(d, dtype=np.float64)
    m = -np.inf
    denom = 0.0
    lo = first_key(t, window)
    for begin in range(lo // span * span, t + 1, span):
        end = min(begin + span, t + 1)
        m_s, l_s = _span_state(
            q, k_cache, v_cache, table, max(begin, lo), end, kvh, block_size, key_tile, scale,
            part,
        )  # fmt: skip
        m, denom = _merge(m, denom, acc, m_s, l_s, part)
    for c in range(d):
        out[c] = acc[c] / denom


def _attention_loop(
    q, k_cache, v_cache, positions, query_req, block_tables, block_size, key_tile, span, scale,
    window, out,
):  # fmt: skip
    n_tokens, n_heads, _ = q.shape
    group = n_heads // k_cache.shape[1]
    for idx in numba.prange(n_tokens * n_heads):
        n = idx // n_heads
        h = idx % n_heads
        _attend_one(
            q[n, h], k_cache, v_cache, block_tables[query_req[n]], positions[n], h // group,
            block_size, key_tile, span, scale, window, out[n, h],
        )  # fmt: skip


def _span_units(
    q, k_cache, v_cache, positions, query_req, block_tables, block_size, key_tile, span, scale,
    window, pair_token, pair_begin, acc_s, m_s, l_s,
):  # fmt: skip
    """Unit u = (pair p, head h), u = p * H + h: the span state of pair p's span."""
    n_heads = q.shape[1]
    group = n_heads // k_cache.shape[1]
    for u in numba.prange(pair_token.shape[0] * n_heads):
        p = u // n_heads
        h = u % n_heads
        n = pair_token[p]
        begin = max(pair_begin[p], first_key(positions[n], window))
        end = min(pair_begin[p] + span, positions[n] + 1)
        m_s[u], l_s[u] = _span_state(
            q[n, h], k_cache, v_cache, block_tables[query_req[n]], begin, end, h // group,
            block_size, key_tile, scale, acc_s[u],
        )  # fmt: skip


def _merge_units(first_pair, acc_s, m_s, l_s, out):
    """Each (token, head): its span states merged in span order, then out = ACC / L."""
    n_tokens, n_heads, d = out.shape
    for idx in numba.prange(n_tokens * n_heads):
        n = idx // n_heads
        h = idx % n_heads
        acc = np.zeros(d, dtype=np.float64)
        m = -np.inf
        denom = 0.0
        for p in range(first_pair[n], first_pair[n + 1]):
            u = p * n_heads + h
            m, denom = _merge(m, denom, acc, m_s[u], l_s[u], acc_s[u])
        for c in range(d):
            out[n, h, c] = acc[c] / denom


def _variants(fn):
    """The serial and the parallel compilation of one loop (same per-item code)."""
    return (
        numba.njit(cache=True, fastmath=False)(fn),
        numba.njit(cache=True, fastmath=False, parallel=True)(fn),
    )


_serial, _parallel = _variants(_attention_loop)
_units_serial, _units_parallel = _variants(_span_units)
_merge_serial, _merge_parallel = _variants(_merge_units)

# Above this many (query, key) pairs per call the thread pool pays for its wake-up.
PARALLEL_MIN_WORK = 1 << 14
# "auto": split spans between threads when it pays; "never" / "always" (tests: same bits).
SPLIT = "auto"
SPLIT_MAX_BYTES = 64 << 20  # span-state scratch above this: the per-(token, head) loop
SPLIT_ITEMS_PER_THREAD = 8  # fewer (token, head) items per thread: too coarse to balance


def first_spans(positions: np.ndarray, span: int, window: int) -> np.ndarray:
    """Each token's first span index floor(lo / S) (0 without a window)."""
    if window <= 0:
        return np.zeros_like(positions)
    return np.maximum(positions - window + 1, 0) // span


def span_pairs(
    positions: np.ndarray, span: int, window: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first_pair [N + 1], pair_token [P], pair_begin [P]): the (token, span) pairs in token
    then span order, spans from the one holding the token's first key; token n's pairs are
    first_pair[n] .. first_pair[n + 1] - 1; pair_begin is the span's absolute start sS."""
    first = first_spans(positions, span, window)
    spans = positions // span + 1 - first
    first_pair = np.zeros(len(positions) + 1, dtype=np.int64)
    np.cumsum(spans, out=first_pair[1:])
    pair_token = np.repeat(np.arange(len(positions), dtype=np.int64), spans)
    index = np.arange(first_pair[-1], dtype=np.int64) - first_pair[pair_token]
    pair_begin = (index + first[pair_token]) * span
    return first_pair, pair_token, pair_begin


def span_states(
    q, k_cache, v_cache, positions, query_req, block_tables, block_size, key_tile, span, scale,
    parallel: bool = False, window: int = 0,
):  # fmt: skip
    """Every span state (unit u = pair * H + head): (first_pair, acc_s [U, D], m_s [U],
    l_s [U]), float64; what the split launch merges."""
    first_pair, pair_token, pair_begin = span_pairs(positions, span, window)
    units = len(pair_token) * q.shape[1]
    acc_s = np.empty((units, q.shape[2]), dtype=np.float64)
    m_s, l_s = np.empty(units, dtype=np.float64), np.empty(units, dtype=np.float64)
    kernel = _units_parallel if parallel else _units_serial
    kernel(
        q, k_cache, v_cache, positions, query_req, block_tables, block_size, key_tile, span,
        scale, window, pair_token, pair_begin, acc_s, m_s, l_s,
    )  # fmt: skip
    return first_pair, acc_s, m_s, l_s


def _split(positions: np.ndarray, span: int, q_shape, parallel: bool, window: int = 0) -> bool:
    """Whether the (token, head, span) split runs: too few (token, head) items for the
    threads, or one item past a thread's fair share, and some query has several spans."""
    if SPLIT != "auto":
        return SPLIT == "always"
    threads = numba.get_num_threads()
    n_tokens, n_heads, dim = q_shape
    pairs = int((positions // span + 1 - first_spans(positions, span, window)).sum())
    if not parallel or threads <= 1 or pairs == n_tokens:
        return False
    if pairs * n_heads * (dim + 2) * 8 > SPLIT_MAX_BYTES:
        return False
    keys, most = int(positions.sum()) + n_tokens, int(positions.max()) + 1
    return n_tokens * n_heads < SPLIT_ITEMS_PER_THREAD * threads or most * threads > keys * n_heads


def paged_attention(
    q, k_cache, v_cache, positions, query_req, block_tables, block_size, key_tile, scale, out,
    span: int, window: int = 0,
) -> None:  # fmt: skip
    """out[n, h] = softmax(q[n,h] . K[lo..t]) V[lo..t] for t = positions[n], lo = 0, or
    max(0, t - window + 1) with a sliding window (see module doc).

    q, out: [N, H, D] float32; k_cache, v_cache: [num_slots, KVH, D] float32;
    positions, query_req: [N] int64; block_tables: [R, max_blocks] int64; span: the plan's
    attention span (a multiple of key_tile). The serial and parallel variants, and the span split, run the same per-span code and the
    same merge in span order, so which one runs (chosen by the amount of work) never changes
    a bit.
    """
    if span % key_tile:
        raise ValueError(f"attention span {span} is not a multiple of the key tile {key_tile}")
    if window < 0:
        raise ValueError(f"attention window must be >= 0 (0: full attention), got {window}")
    parallel = int(positions.sum()) + len(positions) >= PARALLEL_MIN_WORK
    args = (q, k_cache, v_cache, positions, query_req, block_tables, block_size, key_tile, span)
    if _split(positions, span, q.shape, parallel, window):
        first_pair, acc_s, m_s, l_s = span_states(*args, scale, parallel=parallel, window=window)
        (_merge_parallel if parallel else _merge_serial)(first_pair, acc_s, m_s, l_s, out)
        return
    (_parallel if parallel else _serial)(*args, scale, window, out)
