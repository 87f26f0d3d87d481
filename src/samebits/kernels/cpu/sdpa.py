"""The fast plan's attention for one request: torch SDPA over its keys 0..L-1 (stock kernels:
not batch-invariant, the plan's negative control).

Invariant: query row i attends to the keys at positions ``<= pos[i]`` (and ``> pos[i] - window``
when ``window > 0``). Where the queries are the keys' last rows (a prompt, a prompt chunk after
cached or earlier tokens, a decode token: what the engine schedules) and there is no window,
SDPA runs without a dense mask (``is_causal``, the lower-right causal bias or none), so its
flash / memory-efficient kernels serve any length. Elsewhere the mask is materialized in query
blocks of at most ``MASK_BLOCK_ELEMENTS`` (heads x queries x keys) scores, and a windowed
block reads only the keys its window can reach.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention.bias import causal_lower_right

MASK_BLOCK_ELEMENTS = 1 << 24  # 64 MiB of fp32 scores per masked SDPA call


def causal_sdpa(q, k, v, pos: np.ndarray, scale: float, window: int = 0) -> torch.Tensor:
    """SDPA of q [heads, n, d] at absolute positions `pos` over k, v [heads, L, d]. Each call
    passes 4-D tensors (a batch of one): PyTorch's fused SDPA kernels take no other rank, and
    its math fallback materializes heads x n x L fp32 scores (8 GiB at 8k tokens, 32 heads)."""
    n, keys = len(pos), k.shape[1]
    if window <= 0 and is_suffix(pos, keys):
        if n == 1:  # a decode token sees every key
            return _sdpa(q, k, v, scale=scale)
        if n == keys:
            return _sdpa(q, k, v, is_causal=True, scale=scale)
        return _sdpa(q, k, v, attn_mask=causal_lower_right(n, keys), scale=scale)
    return masked_blocks(q, k, v, pos, scale, window)


def _sdpa(q, k, v, **kw) -> torch.Tensor:
    """`F.scaled_dot_product_attention` of 3-D [heads, rows, d] tensors as a batch of one."""
    return F.scaled_dot_product_attention(q[None], k[None], v[None], **kw)[0]


def is_suffix(pos: np.ndarray, keys: int) -> bool:
    """The positions are keys - n, ..., keys - 1 in order (the queries are the last keys)."""
    n = len(pos)
    return n <= keys and int(pos[0]) == keys - n and bool(np.all(np.diff(pos) == 1))


def masked_blocks(q, k, v, pos: np.ndarray, scale: float, window: int) -> torch.Tensor:
    """The dense-mask path in query blocks (memory bounded whatever the length)."""
    heads, keys = q.shape[0], k.shape[1]
    step = max(1, MASK_BLOCK_ELEMENTS // (heads * keys))
    out = torch.empty_like(q)
    for a in range(0, len(pos), step):
        p = pos[a : a + step]
        k0 = max(0, int(p.min()) - window + 1) if window > 0 else 0
        k1 = int(p.max()) + 1
        key = torch.arange(k0, k1, device=q.device)[None, :]
        at = torch.as_tensor(p, device=q.device)[:, None]
        mask = key <= at
        if window > 0:
            mask &= key > at - window
        out[:, a : a + step] = _sdpa(
            q[:, a : a + step], k[:, k0:k1], v[:, k0:k1], attn_mask=mask, scale=scale
        )
    return out
