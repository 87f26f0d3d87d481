"""Paged attention in C (sbattn.c), batch-invariant by construction (see that file).

Definition (S = the plan's `attention_span`, T = its key tile, S a multiple of T; e = sb_exp):
the keys 0..t of a query at position t are cut into spans at absolute positions 0, S, 2S, ...;
each span is an online softmax over its key tiles in order from a fresh state (m = -inf, l = 0,
acc = 0), and the span states are merged in span order from the empty state by one formula,
each product and sum rounded on its own (also when there is a single span):
    M' = max(M, m_s); a = e(M - M'); b = e(m_s - M'); L = L*a + l_s*b; ACC = ACC*a + acc_s*b
and out = ACC / L. A sliding window of W keys (W = 0: full attention) keeps keys lo..t,
lo = max(0, t - W + 1): span s runs over [max(sS, lo), ...) (tiles from its first key), spans
wholly below lo are skipped, all by absolute positions. Work is split between threads (the pool of sbpool.c) by (token, KV head)
items, each running its spans in order; when there are too few items for the threads (a
long-context decode) by (token, KV head, span) units whose states go to scratch and are merged
per item in span order. Same states, same merge, same order: neither the split, the launch nor
the batch changes a bit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from samebits.kernels.cpu import native

# Below this many (query head, key) pairs a call runs on the calling thread.
PARALLEL_MIN_PAIRS = 1 << 13


def supports(head_dim: int, group: int, key_tile: int, span: int) -> bool:
    """Whether the C kernel handles this shape (head_dim a multiple of 16, the limits in
    sbattn.c) and span (a multiple of the key tile)."""
    return bool(native.library().sb_attention_limits(head_dim, group, key_tile, span))


@dataclass(frozen=True)
class AttentionTables:
    """A forward's attention metadata as the C kernel reads it, built once for all layers
    (`InvariantOps.prepare_batch`): int64 contiguous arrays (kept alive here), their
    addresses, and the (query head, key) pair count per query head."""

    positions: np.ndarray
    query_req: np.ndarray
    block_tables: np.ndarray
    pointers: tuple[int, int, int, int]  # positions, query_req, block_tables, table width
    pairs_per_head: int


def attention_tables(positions, query_req, block_tables) -> AttentionTables:
    pos = np.ascontiguousarray(positions, dtype=np.int64)
    req = np.ascontiguousarray(query_req, dtype=np.int64)
    tables = np.ascontiguousarray(block_tables, dtype=np.int64)
    pointers = (pos.ctypes.data, req.ctypes.data, tables.ctypes.data, tables.shape[1])
    return AttentionTables(pos, req, tables, pointers, int(pos.sum()) + len(pos))


def paged_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: np.ndarray,
    query_req: np.ndarray, block_tables: np.ndarray, block_size: int, key_tile: int,
    scale: float, out: torch.Tensor, threads: int, tables: AttentionTables | None = None,
    *, span: int, window: int = 0,
) -> None:  # fmt: skip
    """out[n, h] = softmax(q[n,h] . K[lo..t]) V[lo..t], t = positions[n], by the span
    definition above (`span`: the plan's attention span); all float32 contiguous. `window`:
    0 for full attention (lo = 0), else a sliding window of that many keys, lo =
    max(0, t - window + 1). `tables`: the same metadata prepared once per forward (else built
    here)."""
    if window < 0:
        raise ValueError(f"attention window must be >= 0 (0: full attention), got {window}")
    n_tokens, n_heads, dim = q.shape
    if tables is None:
        tables = attention_tables(positions, query_req, block_tables)
    pos, req, table, width = tables.pointers
    use = threads if tables.pairs_per_head * n_heads >= PARALLEL_MIN_PAIRS else 1
    native.library().sb_attention_window(
        q.data_ptr(), n_heads, dim, k_cache.data_ptr(), v_cache.data_ptr(), k_cache.shape[1],
        pos, req, table, width, block_size, key_tile, span, scale, out.data_ptr(), n_tokens,
        use, window,
    )  # fmt: skip
