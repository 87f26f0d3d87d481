"""The attention certificates' metadata precondition and deployment bounds, checked on the
host for every call (no torch, no triton: the CPU decode graphs check their positions too).

The attention proofs assume (certificate assumption ``metadata``) that the host metadata
is well formed: a program's rows are tokens of its own request, every query token is held
by exactly one program, every program has a live row, positions are >= 0 (and below the
bound the int32 obligations assume), and a request's block-table row covers its keys. This
module checks exactly those facts on the numpy arrays `attention_metadata` builds, before
they are copied to the device, so the precondition is a run-time check, not an assumption.
Cost: a few vector operations over the step's tokens and programs (measured in
``benchmarks/attention_meta_check.py``). Not checked here (the KV-cache manager's invariant):
that two block-table entries sharing a physical page hold equal content (prefix caching).
"""

from __future__ import annotations

import numpy as np

# the deployment bounds the attention certificates' int32 obligations assume
# (`analysis.kernel_prover.attention_int32`; `gate.check_attention_bounds` checks an engine):
# positions below POS_MAX (max_model_len), block-table entries below BLOCKS_MAX
# (num_kv_blocks), at most M_MAX query tokens per launch (`units.M_MAX`); FULL_WINDOW and
# SPLIT_PROGRAMS are the host's own constants (`attention.FULL_WINDOW`,
# `attention.DECODE_SPLIT_PROGRAMS`, equal by test)
ATTENTION_BOUNDS = {"POS_MAX": 1 << 20, "BLOCKS_MAX": 1 << 24, "M_MAX": 1 << 20,
                    "FULL_WINDOW": 1 << 30, "SPLIT_PROGRAMS": 2112}  # fmt: skip
POS_MAX = ATTENTION_BOUNDS["POS_MAX"]


class MetadataError(ValueError):
    """Attention metadata that breaks the certificates' precondition (a host bug)."""


def check_metadata(positions: np.ndarray, qsl: np.ndarray, tables: np.ndarray,
                   req: np.ndarray, row0: np.ndarray, tokens_per_tile: int, block_size: int,
                   pos_max: int = POS_MAX) -> None:  # fmt: skip
    """Raise :class:`MetadataError` unless the metadata meets the precondition."""
    n = positions.shape[0]
    if qsl[0] != 0 or qsl[-1] != n or np.any(np.diff(qsl) < 0):
        raise MetadataError("query_start_loc must rise from 0 to the number of query tokens")
    check_positions(positions, tables.shape[1] * block_size, pos_max)
    _check_programs(qsl, req, row0, tokens_per_tile, n)


def check_positions(positions: np.ndarray, covered, pos_max: int = POS_MAX) -> None:
    """Positions ``>= 0``, below ``pos_max`` and below ``covered`` (the keys a request's
    block-table row maps: one number, or one per position)."""
    if positions.size and (
        positions.min() < 0 or np.any(positions >= np.minimum(covered, pos_max))
    ):
        raise MetadataError(
            f"positions must lie in 0..(keys the block-table row covers - 1) and below the "
            f"int32 bound {pos_max}"
        )


def _check_programs(qsl: np.ndarray, req: np.ndarray, row0: np.ndarray, tpt: int, n: int) -> None:
    """Program p holds tokens row0[p] .. min(row0[p] + tpt, end of its request) - 1: a live
    row of its own request; over all programs each token exactly once."""
    if req.size == 0:
        if n:
            raise MetadataError("query tokens but no attention program")
        return
    if req.min() < 0 or req.max() >= qsl.size - 1:
        raise MetadataError("a program's request is out of range")
    start, end = qsl[req], qsl[req + 1]
    if np.any(row0 < start) or np.any(row0 >= end):
        raise MetadataError("a program's first row is not a token of its own request")
    stop = np.minimum(row0 + tpt, end)
    order = np.argsort(row0, kind="stable")
    if row0[order[0]] != 0 or stop[order[-1]] != n or np.any(row0[order[1:]] != stop[order[:-1]]):
        raise MetadataError("the programs' rows do not hold every query token exactly once")
