"""Paged causal attention on the GPU: one kernel for prefill, chunked prefill, decode and mixed.

Invariant: the output row of query token i, head h, depends only on q[i, h], its position t
and the cached keys/values 0..t of its own request; keys are reduced in tiles of
``KEY_BLOCK`` at absolute positions with an online softmax in tile order, denominators by MMA.
So chunking, batching, tile height, GQA packing and physical page placement never change bits.
"""

from __future__ import annotations

import math

import torch

from samebits.kernels.triton._attention_kernel import paged_attention_kernel
from samebits.kernels.triton.attention_meta import (
    DECODE_BLOCK_M,
    AttentionMeta,
    attention_metadata,
)

__all__ = ["KEY_BLOCK", "AttentionMeta", "attention_metadata", "paged_attention"]

KEY_BLOCK = 64  # key tile width: part of the numerics (tile boundaries at multiples of it)
# Register cap (ptxas .maxnreg) of decode launches (tiles of DECODE_BLOCK_M rows, head dim
# <= 128): the compiler's 142 registers fit 3 programs of 4 warps per SM, so a batch-64 decode
# step's 512 programs ran in 1.3 waves; at 128 (4 bytes spilled) 4 fit, one wave. H200,
# `benchmarks/attention_sweep.py`, 2026-12-01: 64 requests x 256 keys 35.5 -> 28.9 us, 256 x
# 560 181.8 -> 164.4 us; bits equal. Prefill tiles (64 rows, 254 registers) would spill
# 744 bytes under it: no cap. Register allocation never changes a result.
DECODE_MAXNREG = 128
ATTENTION_MAXNREG: int | None = None  # an experiment's override of `register_cap` (benchmarks)
LOG2E = 1.4426950408889634


def _check(q: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor, meta: AttentionMeta):
    n, heads, d = q.shape
    if k_cache.dim() != 3 or k_cache.shape != v_cache.shape or k_cache.shape[2] != d:
        raise ValueError("k_cache / v_cache must both be [num_slots, HKV, D]")
    if heads != k_cache.shape[1] * meta.group:
        raise ValueError(
            f"q has {heads} heads, expected HKV * group = {k_cache.shape[1]} * {meta.group}"
        )
    if d < 16 or d & (d - 1):
        raise ValueError(f"head dim must be a power of two >= 16, got {d}")
    if not (q.is_contiguous() and k_cache.is_contiguous() and v_cache.is_contiguous()):
        raise ValueError("paged_attention expects contiguous q, k_cache and v_cache")
    if meta.positions.numel() != n:
        raise ValueError(f"metadata is for {meta.positions.numel()} tokens, q has {n}")


def paged_attention(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    meta: AttentionMeta,
    scale: float,
) -> torch.Tensor:
    """Causal attention of ``q [N, H, D]`` over the paged cache; returns ``[N, H, D]`` in q.dtype."""
    _check(q, k_cache, v_cache, meta)
    out = torch.empty_like(q)
    if meta.num_programs == 0:
        return out
    hkv, d = k_cache.shape[1], k_cache.shape[2]
    paged_attention_kernel[(meta.num_programs, hkv)](
        q, k_cache, v_cache, out, meta.positions, meta.prog_req, meta.prog_row0, meta.query_end,
        meta.block_tables, meta.block_tables.shape[1], scale * LOG2E, HKV=hkv, GROUP=meta.group,
        D=d, PAGE=meta.block_size, BLOCK_M=meta.block_m, BLOCK_N=KEY_BLOCK,
        num_warps=meta.num_warps, **_cap(register_cap(meta.block_m, d)),
    )  # fmt: skip
    return out


def register_cap(block_m: int, head_dim: int) -> int | None:
    """The launch's register cap (None: the compiler's choice), from static facts only."""
    if ATTENTION_MAXNREG is not None:
        return ATTENTION_MAXNREG
    return DECODE_MAXNREG if block_m == DECODE_BLOCK_M and head_dim <= 128 else None


def _cap(maxnreg: int | None) -> dict:
    return {} if maxnreg is None else {"maxnreg": maxnreg}


def default_scale(head_dim: int) -> float:
    """The usual softmax scale ``1/sqrt(head_dim)``."""
    return 1.0 / math.sqrt(head_dim)
