"""Paged attention in C (sbattn.c), batch-invariant by construction (see that file).

Work is split between threads by (token, KV head) items (strided, on the pool of sbpool.c);
each item is computed entirely by one thread, so neither the split nor the batch changes a bit.
"""

from __future__ import annotations

import numpy as np
import torch

from samebits.kernels.cpu import native

# Below this many (query head, key) pairs a call runs on the calling thread.
PARALLEL_MIN_PAIRS = 1 << 13


def supports(head_dim: int, group: int, key_tile: int) -> bool:
    """Whether the C kernel handles this shape (head_dim a multiple of 16, limits in sbattn.c)."""
    return bool(native.library().sb_attention_limits(head_dim, group, key_tile))


def paged_attention(
    q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, positions: np.ndarray,
    query_req: np.ndarray, block_tables: np.ndarray, block_size: int, key_tile: int,
    scale: float, out: torch.Tensor, threads: int,
) -> None:  # fmt: skip
    """out[n, h] = softmax(q[n,h] . K[0..t]) V[0..t], t = positions[n]; all float32 contiguous."""
    n_tokens, n_heads, dim = q.shape
    n_kv = k_cache.shape[1]
    pos = np.ascontiguousarray(positions, dtype=np.int64)
    req = np.ascontiguousarray(query_req, dtype=np.int64)
    tables = np.ascontiguousarray(block_tables, dtype=np.int64)
    args = (
        q.data_ptr(), n_heads, dim, k_cache.data_ptr(), v_cache.data_ptr(), n_kv,
        pos.ctypes.data, req.ctypes.data, tables.ctypes.data, tables.shape[1], block_size,
        key_tile, scale, out.data_ptr(),
    )  # fmt: skip
    pairs = (int(pos.sum()) + n_tokens) * n_heads
    use = threads if pairs >= PARALLEL_MIN_PAIRS else 1
    native.library().sb_attention(*args, n_tokens, use)
