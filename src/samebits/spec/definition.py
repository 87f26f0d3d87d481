"""The property samebits sells, as predicates over recorded views (DESIGN.md §1).

A request's *input* is its prompt token ids plus its sampler state (the sampling parameters
that decide tokens, including the seed). Its *view* is the list of output records
`(logits_row_i, token_i)`, where `logits_row_i` is the little-endian float32 bytes of the
full-vocabulary row the sampler used at output position `i`.

Deterministic: in any two executions, any two requests with equal inputs have views that agree
bit for bit at every index both reached (one may have stopped earlier).
Reference semantics (stronger): every view is a prefix of `Ref(input)` (see `reference.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import numpy as np

from samebits.outputs import logits_row_bytes
from samebits.sampling import SamplingParams


@dataclass(frozen=True)
class RequestInput:
    prompt_token_ids: tuple[int, ...]
    sampler_state: tuple[tuple[str, Any], ...]  # SamplingParams.sampler_state(), seed included


@dataclass(frozen=True)
class OutputRecord:
    logits_row: bytes  # little-endian float32 bytes of the full-vocabulary row
    token: int


@dataclass(frozen=True)
class RequestView:
    input: RequestInput
    records: tuple[OutputRecord, ...]


def views_agree(a: RequestView, b: RequestView) -> bool:
    """Equal inputs => equal records at every index both views reached."""
    if a.input != b.input:
        return True
    common = min(len(a.records), len(b.records))
    return a.records[:common] == b.records[:common]


def deterministic(execution_a: Sequence[RequestView], execution_b: Sequence[RequestView]) -> bool:
    """Every two views with equal inputs, within or across the two executions, agree."""
    views = [*execution_a, *execution_b]
    return all(views_agree(a, b) for a, b in combinations(views, 2))


def is_reference_prefix(view: RequestView, reference: RequestView) -> bool:
    """`view` has the reference's input and its records are a prefix of the reference's."""
    n = len(view.records)
    return view.input == reference.input and view.records == reference.records[:n]


def first_mismatch(a: RequestView, b: RequestView) -> str | None:
    """Why `a` and `b` differ over the indices both reached (inputs included), or None."""
    if a.input != b.input:
        return f"inputs differ:\n  {a.input}\n  {b.input}"
    for i, (ra, rb) in enumerate(zip(a.records, b.records, strict=False)):
        if ra.token != rb.token:
            return f"position {i}: token {ra.token} != {rb.token}"
        if ra.logits_row != rb.logits_row:
            return f"position {i}: {_row_difference(ra.logits_row, rb.logits_row)}"
    return None


def first_disagreement(
    execution_a: Sequence[RequestView], execution_b: Sequence[RequestView]
) -> str | None:
    """A description of the first pair of views that breaks `deterministic`, or None."""
    views = [*execution_a, *execution_b]
    for (i, a), (j, b) in combinations(enumerate(views), 2):
        if not views_agree(a, b):
            return f"views {i} and {j} (of {len(views)}): {first_mismatch(a, b)}"
    return None


def request_input(prompt_token_ids: Sequence[int], params: SamplingParams) -> RequestInput:
    """The input of a request (params must carry the seed this choice was sampled with)."""
    return RequestInput(tuple(int(t) for t in prompt_token_ids), params.sampler_state())


def view_from_output(
    prompt_token_ids: Sequence[int],
    params_with_seed: SamplingParams,
    token_ids: Sequence[int],
    logits: np.ndarray,
) -> RequestView:
    """A view from an engine output: `logits[i]` (float32 [n, V]) is the row of `token_ids[i]`."""
    if not isinstance(logits, np.ndarray) or logits.ndim != 2 or len(logits) != len(token_ids):
        raise ValueError(
            f"logits must be a 2-D array with one row per token ({len(token_ids)}), "
            f"got {getattr(logits, 'shape', type(logits).__name__)}"
        )
    records = tuple(
        OutputRecord(logits_row_bytes(row), int(t))
        for row, t in zip(logits, token_ids, strict=True)
    )
    return RequestView(request_input(prompt_token_ids, params_with_seed), records)


def _row_difference(row_a: bytes, row_b: bytes) -> str:
    a, b = np.frombuffer(row_a, dtype="<f4"), np.frombuffer(row_b, dtype="<f4")
    if a.shape != b.shape:
        return f"logits rows have different lengths {a.size} != {b.size}"
    differ = np.flatnonzero(a.view("<u4") != b.view("<u4"))
    first = int(differ[0])
    return (
        f"logits rows differ in {differ.size} of {a.size} entries; "
        f"first at id {first}: {a[first]!r} != {b[first]!r}"
    )
