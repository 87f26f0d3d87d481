"""Paged causal attention on the GPU: one definition for prefill, chunked prefill, decode, mixed.

Invariant: the output row of query token i, head h, depends only on q[i, h], its position t
and the cached keys/values 0..t of its own request (lo..t under a sliding window); keys are cut into spans of
``meta.span`` keys at absolute positions, each span reduced in tiles of ``KEY_BLOCK`` at
absolute positions with an online softmax in tile order (denominators by MMA), and the span
states folded in span order by one merge formula (`_attention_kernel`). So chunking,
batching, tile height, GQA packing, physical page placement and the launch (spans in
sequence, or split-KV decode: spans in parallel, then the ordered merge) never change bits.
The launch is chosen by `decode_splits` from the batch and a bound on the positions only.
"""

from __future__ import annotations

import math

import torch

from samebits.kernels.triton._attention_kernel import (
    merge_spans_kernel,
    paged_attention_kernel,
    split_span_kernel,
)
from samebits.kernels.triton.attention_meta import (
    DECODE_BLOCK_M,
    MERGE_UNROLL,
    MERGE_WARPS,
    SPLIT_FEW_PROGRAMS,
    SPLIT_STAGES,
    SPLIT_WARPS,
    AttentionMeta,
    attention_metadata,
    default_block_m,
    default_num_stages,
    merge_block_m,
)

__all__ = [
    "KEY_BLOCK",
    "AttentionMeta",
    "attention_metadata",
    "decode_splits",
    "paged_attention",
]

# The kernels' window for full attention: above any position (keys max(t - W + 1, 0)..t = 0..t).
FULL_WINDOW = 1 << 30
KEY_BLOCK = 64  # key tile width: part of the numerics (tile boundaries at multiples of it)
# Register cap (ptxas .maxnreg) of decode launches (tiles of DECODE_BLOCK_M rows, head dim
# <= 128): the compiler's 142 registers fit 3 programs of 4 warps per SM, so a batch-64 decode
# step's 512 programs ran in 1.3 waves; at 128 (4 bytes spilled) 4 fit, one wave. H200,
# `benchmarks/attention_sweep.py`, 2026-12-01: 64 requests x 256 keys 35.5 -> 28.9 us, 256 x
# 560 181.8 -> 164.4 us; bits equal. Prefill tiles (64 rows, 254 registers) would spill
# 744 bytes under it: no cap. Register allocation never changes a result.
DECODE_MAXNREG = 128
ATTENTION_MAXNREG: int | None = None  # an experiment's override of `register_cap` (benchmarks)
ATTENTION_STAGES: int | None = None  # an experiment's num_stages for every launch (benchmarks)
LOG2E = 1.4426950408889634
# Split-KV decode: a decode step with fewer than this many (request, KV head) pairs runs each
# request's spans in up to this many / pairs programs (16 per SM of an H200, 132 SMs), then
# the ordered merge; larger steps already fill the GPU with spans in sequence. H200,
# 2026-12-01 (`benchmarks/long_context.py --split-programs 528 1056 2112`, span 512): batch
# 16 x 16k contexts at 63% / 71% / 77% of HBM bandwidth; batch 1 no faster past 528.
DECODE_SPLIT_PROGRAMS = 2112
# No contraction of a multiply and an add into one fma by the compiler: the kernels' only fmas
# are their written `tl.fma` (part of the definition the CPU replay computes; issue 27).
FP_FUSION = False


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
    window: int = 0,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Causal attention of ``q [N, H, D]`` over the paged cache; returns ``[N, H, D]`` in
    ``out_dtype`` (default q.dtype; float32: the rows before the cast). ``window`` > 0: a sliding window, the query at t sees keys max(t - window + 1, 0)
    ..t; 0: all keys 0..t (the kernels get FULL_WINDOW: the same masks, the same bits)."""
    _check(q, k_cache, v_cache, meta)
    if not 0 <= window < FULL_WINDOW:
        raise ValueError(f"attention window must be in [0, {FULL_WINDOW}), got {window}")
    kernel_window = window or FULL_WINDOW
    if meta.span % KEY_BLOCK:
        raise ValueError(f"attention span {meta.span} is not a multiple of {KEY_BLOCK}")
    out = torch.empty(q.shape, dtype=out_dtype or q.dtype, device=q.device)
    if meta.num_programs == 0:
        return out
    splits = decode_splits(meta, k_cache.shape[1])
    if splits:
        _split_decode(q, k_cache, v_cache, meta, scale, splits, out, kernel_window)
        return out
    hkv, d = k_cache.shape[1], k_cache.shape[2]
    paged_attention_kernel[(meta.num_programs, hkv)](
        q, k_cache, v_cache, out, meta.positions, meta.prog_req, meta.prog_row0, meta.query_end,
        meta.block_tables, meta.block_tables.shape[1], scale * LOG2E, kernel_window, HKV=hkv,
        GROUP=meta.group,
        D=d, PAGE=meta.block_size, BLOCK_M=meta.block_m, BLOCK_N=KEY_BLOCK, SPAN=meta.span,
        num_warps=meta.num_warps, enable_fp_fusion=FP_FUSION,
        **sequential_options(meta.block_m, d),
    )  # fmt: skip
    return out


def sequential_options(block_m: int, head_dim: int) -> dict:
    """Launch options of the sequential kernel: the register cap, the pipeline stages of its
    tile height (`attention_meta.default_num_stages`; an experiment's ATTENTION_STAGES wins)."""
    return _staged(_cap(register_cap(block_m, head_dim)), default_num_stages(block_m))


def split_options(programs: int) -> dict:
    """Launch options of a split-KV span launch of ``programs`` programs: SPLIT_WARPS warps, no
    register cap, SPLIT_STAGES pipeline stages up to SPLIT_FEW_PROGRAMS programs, else the
    compiler's default (an experiment's ATTENTION_MAXNREG / ATTENTION_STAGES win)."""
    stages = SPLIT_STAGES if programs <= SPLIT_FEW_PROGRAMS else None
    return {"num_warps": SPLIT_WARPS, **_staged(_cap(ATTENTION_MAXNREG), stages)}


def _staged(opts: dict, stages: int | None) -> dict:
    """``opts`` with ``num_stages`` set to ``stages``, unless None or already set."""
    return opts if stages is None or "num_stages" in opts else {**opts, "num_stages": stages}


def decode_splits(meta: AttentionMeta, kv_heads: int) -> int:
    """Programs per request of a split-KV decode launch, or 0 for spans in sequence: from the
    number of requests, KV heads and the bound on positions only (either launch computes the
    same bits)."""
    if not meta.one_token_each or meta.block_m != default_block_m(1, meta.group):
        return 0  # split-KV only at the decode tile height (what its certificates cover)
    spans = meta.max_position // meta.span + 1
    splits = -(-DECODE_SPLIT_PROGRAMS // (meta.num_requests * kv_heads))
    return min(splits, spans) if splits > 1 and spans > 1 else 0


def _split_decode(
    q, k_cache, v_cache, meta: AttentionMeta, scale: float, splits: int, out,
    window: int = FULL_WINDOW,
):  # fmt: skip
    """Each span's state into a scratch tensor [request, span, head], then the ordered merge."""
    r, heads = meta.num_requests, q.shape[1]
    hkv, d = k_cache.shape[1], k_cache.shape[2]
    max_spans = meta.max_position // meta.span + 1
    m_s = torch.empty((r * max_spans * heads,), dtype=torch.float32, device=q.device)
    l_s = torch.empty_like(m_s)
    acc_s = torch.empty((r * max_spans * heads * d,), dtype=torch.float32, device=q.device)
    facts = dict(HKV=hkv, GROUP=meta.group, D=d, BLOCK_M=meta.block_m, SPAN=meta.span)
    split_span_kernel[(hkv, splits, r)](
        q, k_cache, v_cache, m_s, l_s, acc_s, meta.positions, meta.block_tables,
        meta.block_tables.shape[1], max_spans, scale * LOG2E, window, PAGE=meta.block_size,
        BLOCK_N=KEY_BLOCK, enable_fp_fusion=FP_FUSION, **facts,
        **split_options(r * splits * hkv),
    )  # fmt: skip
    merge_spans_kernel[(r, hkv)](
        out, m_s, l_s, acc_s, meta.positions, max_spans, window, num_warps=MERGE_WARPS,
        enable_fp_fusion=FP_FUSION, UNROLL=MERGE_UNROLL,
        **{**facts, "BLOCK_M": merge_block_m(meta.group)},
    )  # fmt: skip


def register_cap(block_m: int, head_dim: int) -> int | None:
    """The launch's register cap (None: the compiler's choice), from static facts only."""
    if ATTENTION_MAXNREG is not None:
        return ATTENTION_MAXNREG
    return DECODE_MAXNREG if block_m == DECODE_BLOCK_M and head_dim <= 128 else None


def _cap(maxnreg: int | None) -> dict:
    """Launch options of static facts: the register cap, an experiment's pipeline stages."""
    extra = {} if ATTENTION_STAGES is None else {"num_stages": ATTENTION_STAGES}
    return extra if maxnreg is None else {**extra, "maxnreg": maxnreg}


def default_scale(head_dim: int) -> float:
    """The usual softmax scale ``1/sqrt(head_dim)``."""
    return 1.0 / math.sqrt(head_dim)
