"""Host-side metadata of one paged-attention call: which program holds which query rows.

Invariant: the metadata only decides *which program* computes a query row and how tall its tile
is (``block_m`` rows = ``block_m // group`` tokens x ``group`` query heads of one KV head). A
row's numbers come from its own position and its request's keys, so any tiling gives the same
bits. Built once per forward from numpy arrays, copied to the device in one transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import triton

from samebits.kernels.attention_check import check_metadata
from samebits.kernels.interface import ATTENTION_SPAN
from samebits.kernels.metadata import to_device_aligned

PREFILL_BLOCK_M = 64
DECODE_BLOCK_M = 16
MERGE_MIN_ROWS = 4
ATTENTION_WARPS = 4
# long prompts: a step whose longest query has WIDE_MIN_QUERY tokens or more runs tiles of
# 128 rows on 8 warps (the same bits: tile height is a certified goal; H100, 2026-12-07,
# benchmarks/prefill_probe.py: 2.93 vs 3.30 ms at 8k, 41.9 vs 47.1 ms at 32k)
WIDE_BLOCK_M = 128
WIDE_WARPS = 8
WIDE_MIN_QUERY = 1024
# and 2 pipeline stages, not the compiler's 3 (the same bits; H100, 2026-12-07, session 22,
# benchmarks/prefill_probe.py: 2.18 vs 2.27 ms at 8k, 31.4 vs 32.2 ms at 32k)
WIDE_STAGES = 2
# Split-KV decode (`split_span_kernel`, DECODE_BLOCK_M rows) with at most SPLIT_FEW_PROGRAMS
# programs (one per SM of an H100 / H200: batch 1 up to 8k of context with 8 KV heads) runs
# SPLIT_STAGES pipeline stages. Triton 3.6 gives its page-indirect K / V tile loads a second
# shared-memory buffer only from 5 stages (one at its default 3, so each key tile waited for
# its own loads; tests/kernels/triton/test_attention_pipelining.py). H200, 2026-12-07,
# benchmarks/split_decode_probe.py, span kernel alone: batch 1 x 4k 20.7 -> 18.1 us, x 8k
# 24.0 -> 19.7 us; with more programs the buffers cost occupancy (batch 1 x 32k 46.8 -> 61.4,
# batch 16 x 4k 82.1 -> 93.1): the compiler's default there. The same bits (a launch choice).
SPLIT_STAGES = 5
SPLIT_FEW_PROGRAMS = 132
# and on SPLIT_WARPS warps with no register cap: H100, 2026-12-07 (session 25, two runs),
# benchmarks/split_decode_probe.py, span kernel alone against 4 warps capped at 128 registers:
# batch 16 x 4k-32k 0.8-2.6% faster, batch 1 x 4k / 8k / 32k / 128k 1.7-5.6% faster, 1 x 16k
# 1.4-2.7% slower; 2 warps under the cap ran 1.4x slower, 1 warp slower. The same bits.
SPLIT_WARPS = 2
MERGE_WARPS = ATTENTION_WARPS  # the split-KV merge's launch (`merge_spans_kernel`)
# spans per loop trip of the merge (their loads issue together): H100, 2026-12-07, session
# 25, benchmarks/split_decode_probe.py, 4 a trip at 3 stages against one at 4 stages: 1 x 32k
# 14.8 -> 9.6 us, 1 x 128k 50.6 -> 30.9, 16 x 16k 9.9 -> 7.6 (the same bits)
MERGE_UNROLL = 4


@dataclass(frozen=True)
class AttentionMeta:
    """Device tensors (int32) and static launch facts of one attention call."""

    positions: torch.Tensor  # [N] absolute position of each query token
    prog_req: torch.Tensor  # [P] request of each program
    prog_row0: torch.Tensor  # [P] first query token (row of q) of each program
    query_end: torch.Tensor  # [R] one past the last query token of each request
    block_tables: torch.Tensor  # [R, B] physical block of each logical block
    num_programs: int
    block_size: int
    group: int
    block_m: int
    num_warps: int
    span: int = ATTENTION_SPAN  # keys per span of the attention definition (the plan's)
    # decode launch facts: every request has one query token (token r is request r's), and a
    # bound on the step's positions (the step's maximum, or the decode graph's table width);
    # they choose between launches that compute the same bits, never a value
    one_token_each: bool = False
    max_position: int = 0

    @property
    def num_requests(self) -> int:
        return int(self.query_end.shape[0])


def default_block_m(max_query_len: int, group: int) -> int:
    """Tile height: 16 rows for pure decode steps, 128 where the longest query has at least
    WIDE_MIN_QUERY tokens, 64 otherwise (at least one token's heads)."""
    if max_query_len <= 1:
        base = DECODE_BLOCK_M
    else:
        base = WIDE_BLOCK_M if max_query_len >= WIDE_MIN_QUERY else PREFILL_BLOCK_M
    return max(base, triton.next_power_of_2(group))


def default_num_warps(block_m: int) -> int:
    """Warps of a tile height's launch: WIDE_WARPS from WIDE_BLOCK_M rows, else 4."""
    return WIDE_WARPS if block_m >= WIDE_BLOCK_M else ATTENTION_WARPS


def default_num_stages(block_m: int) -> int | None:
    """Pipeline stages of a tile height's sequential launch: WIDE_STAGES from WIDE_BLOCK_M
    rows, else None (the compiler's default). A launch choice: no bit depends on it."""
    return WIDE_STAGES if block_m >= WIDE_BLOCK_M else None


def tile_heights(group: int) -> list[int]:
    """Every tile height `default_block_m` may choose for GQA group ``group`` (ascending)."""
    bases = (DECODE_BLOCK_M, PREFILL_BLOCK_M, WIDE_BLOCK_M)
    return sorted({max(b, triton.next_power_of_2(group)) for b in bases})


def merge_block_m(group: int) -> int:
    """Tile height of the split-KV merge (`merge_spans_kernel`): the group's heads padded to a
    power of two, at least MERGE_MIN_ROWS. A row's fold never reads another row, so the height
    changes no bit (proved per head class, goal 4); it is not the split kernel's 16, whose
    rows feed ``tl.dot``."""
    return max(MERGE_MIN_ROWS, triton.next_power_of_2(group))


def _programs(query_start_loc: np.ndarray, tokens_per_tile: int) -> tuple[np.ndarray, np.ndarray]:
    """(request, first token) of every program: each request's tokens cut into tiles in order."""
    starts = query_start_loc[:-1].astype(np.int64)
    lens = np.diff(query_start_loc).astype(np.int64)
    counts = -(-lens // tokens_per_tile)
    req = np.repeat(np.arange(lens.size, dtype=np.int64), counts)
    first_prog = np.cumsum(counts) - counts
    row0 = starts[req] + tokens_per_tile * (np.arange(req.size) - first_prog[req])
    return req, row0


def attention_metadata(
    positions: np.ndarray,
    query_start_loc: np.ndarray,
    block_tables: np.ndarray,
    block_size: int,
    group: int,
    device,
    block_m: int | None = None,
    num_warps: int | None = None,
    span: int = ATTENTION_SPAN,
) -> AttentionMeta:
    """Metadata for q rows grouped by request (``query_start_loc`` [R+1]) at ``positions``."""
    qsl = np.asarray(query_start_loc, dtype=np.int64)
    tables = np.ascontiguousarray(block_tables, dtype=np.int32)
    if tables.ndim != 2 or tables.shape[0] != qsl.size - 1:
        raise ValueError("block_tables must be [num_requests, max_blocks]")
    max_query_len = int(np.diff(qsl).max(initial=0))
    block_m = block_m or default_block_m(max_query_len, group)
    num_warps = num_warps or default_num_warps(block_m)
    if block_m < max(16, group) or block_m & (block_m - 1):
        raise ValueError(f"block_m must be a power of two >= max(16, group), got {block_m}")
    req, row0 = _programs(qsl, block_m // group)
    pos = np.asarray(positions, dtype=np.int32)
    # the certificates' metadata precondition, checked (kernels.attention_check)
    check_metadata(pos, qsl, tables, req, row0, block_m // group, block_size)
    arrays = [pos, req, row0, qsl[1:], tables]
    pos_d, req_d, row0_d, qend_d, bt_d = to_device_aligned(arrays, np.int32, device)
    return AttentionMeta(
        positions=pos_d, prog_req=req_d, prog_row0=row0_d, query_end=qend_d,
        block_tables=bt_d, num_programs=int(req.size), block_size=block_size,
        group=group, block_m=block_m, num_warps=num_warps, span=span,
        one_token_each=max_query_len == 1 and int(qsl[-1]) == qsl.size - 1,
        max_position=int(np.max(positions, initial=0)),
    )  # fmt: skip
