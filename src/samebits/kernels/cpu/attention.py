"""Batch-invariant paged attention (numba).

Invariant (by construction): the output for query token n, head h is computed by one thread,
reading keys 0..t (t = positions[n]) of its own request through `block_tables` in tiles
aligned to absolute positions (0, T, 2T, ...), with an online softmax whose operations and
their order depend only on t, the plan's key tile T and the values — never on how many
queries are in the batch, which requests they belong to, where pages sit, or thread count.
Prefill, chunked prefill and decode are the same code path.
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
def _attend_one(q, k_cache, v_cache, table, t, kvh, block_size, key_tile, scale, out):
    """Attention of one query row (one head) over positions 0..t of its request."""
    d = q.shape[0]
    acc = np.zeros(d, dtype=np.float64)
    scores = np.empty(key_tile, dtype=np.float64)
    m = -np.inf
    denom = 0.0
    for start in range(0, t + 1, key_tile):
        end = min(start + key_tile, t + 1)
        m_tile = -np.inf
        for j in range(start, end):
            slot = table[j // block_size] * block_size + j % block_size
            s = _dot(q, k_cache[slot, kvh]) * scale
            scores[j - start] = s
            m_tile = max(m_tile, s)
        m_new = max(m, m_tile)
        alpha = math.exp(m - m_new)
        denom *= alpha
        for c in range(d):
            acc[c] *= alpha
        for j in range(start, end):
            slot = table[j // block_size] * block_size + j % block_size
            p = math.exp(scores[j - start] - m_new)
            denom += p
            v = v_cache[slot, kvh]
            for c in range(d):
                acc[c] += p * float(v[c])
        m = m_new
    for c in range(d):
        out[c] = acc[c] / denom


def _attention_loop(
    q, k_cache, v_cache, positions, query_req, block_tables, block_size, key_tile, scale, out
):
    n_tokens, n_heads, _ = q.shape
    group = n_heads // k_cache.shape[1]
    for idx in numba.prange(n_tokens * n_heads):
        n = idx // n_heads
        h = idx % n_heads
        _attend_one(
            q[n, h],
            k_cache,
            v_cache,
            block_tables[query_req[n]],
            positions[n],
            h // group,
            block_size,
            key_tile,
            scale,
            out[n, h],
        )


_serial = numba.njit(cache=True, fastmath=False)(_attention_loop)
_parallel = numba.njit(cache=True, fastmath=False, parallel=True)(_attention_loop)

# Above this many (query, key) pairs per call the thread pool pays for its wake-up.
PARALLEL_MIN_WORK = 1 << 14


def paged_attention(
    q, k_cache, v_cache, positions, query_req, block_tables, block_size, key_tile, scale, out
) -> None:
    """out[n, h] = softmax(q[n,h] . K[0..t]) V[0..t] for t = positions[n] (see module doc).

    q, out: [N, H, D] float32; k_cache, v_cache: [num_slots, KVH, D] float32;
    positions, query_req: [N] int64; block_tables: [R, max_blocks] int64.
    The serial and parallel variants run the same per-(token, head) code, so which one runs
    (chosen by the amount of work) never changes a bit.
    """
    work = int(positions.sum()) + len(positions)
    kernel = _parallel if work >= PARALLEL_MIN_WORK else _serial
    kernel(
        q, k_cache, v_cache, positions, query_req, block_tables, block_size, key_tile, scale, out
    )
