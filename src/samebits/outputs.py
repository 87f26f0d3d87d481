"""What the engine returns per request: `RequestOutput` holding `CompletionOutput`s.

`RequestOutputKind` (chosen per request in `LLMEngine.add_request`, vLLM's idea) says what
an output carries: CUMULATIVE (the default) everything generated so far, DELTA only what is
new since the request's previous output, FINAL_ONLY one cumulative output when the request
finishes. The concatenation of a request's DELTA outputs (token ids, text, digests, logprobs,
logits rows) equals its CUMULATIVE output at the same step, bit for bit. Every sampled position
carries the SHA-256 digest of the float32 logits row the sampler used, so two outputs can be
compared bit for bit without shipping the rows; `return_logits` ships the rows themselves.
"""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass, field

import numpy as np

FINISH_REASONS = ("stop", "length", "abort")


class RequestOutputKind(enum.Enum):
    """What each `RequestOutput` of a request carries (see the module docstring).

    DELTA outputs: `token_ids`, `text`, `logits_digests`, `logprobs` and `logits` hold the
    new positions only (text: the new finalized text; it may be empty while a multi-byte
    character or a possible stop string is held back); `cumulative_logprob`, `finish_reason`
    and `stop_reason` are the request's running values; `prompt_logprobs` comes on the first
    output only (None afterwards); `prompt_token_ids` is one list shared by all the request's
    outputs (do not mutate it). Each step then costs O(new tokens), not O(tokens so far).
    """

    CUMULATIVE = "cumulative"
    DELTA = "delta"
    FINAL_ONLY = "final_only"


def logits_row_bytes(row: np.ndarray) -> bytes:
    """The row's canonical bytes: little-endian float32, C order.

    Raises ValueError unless `row` is a 1-D float32 numpy array (either byte order).
    """
    return _canonical(row).tobytes()


def _canonical(row: np.ndarray) -> np.ndarray:
    """`row` as a C-contiguous little-endian float32 array (no copy when it already is)."""
    if not isinstance(row, np.ndarray) or row.ndim != 1:
        raise ValueError(f"logits row must be a 1-D numpy array, got {describe_value(row)}")
    if row.dtype.kind != "f" or row.dtype.itemsize != 4:
        raise ValueError(f"logits row must have dtype float32, got {row.dtype}")
    return np.ascontiguousarray(row, dtype="<f4")


def logits_digest(row: np.ndarray) -> str:
    """Hex SHA-256 of `logits_row_bytes(row)`, hashed from the canonical array's buffer (the
    same bytes, without a 512 KB copy per 128k-vocab row)."""
    return hashlib.sha256(_canonical(row)).hexdigest()


def logits_digests(rows: np.ndarray) -> list[str]:
    """`logits_digest` of each row of a 2-D float32 array."""
    _check_rows(rows)
    return [logits_digest(row) for row in rows]


@dataclass
class CompletionOutput:
    """One choice of a request.

    `token_ids[i]` was sampled from the logits row whose digest is `logits_digests[i]` (and,
    with `return_logits`, which is `logits[i]`). `text` may end before the last token when a
    stop string matched. `seed` is the seed this choice was sampled with (replayable).
    `logprobs[i]` maps token ids to log-probabilities of the raw row at position i.
    """

    index: int
    text: str
    token_ids: list[int]
    logprobs: list[dict[int, float]] | None
    finish_reason: str | None
    stop_reason: str | int | None
    seed: int
    logits_digests: list[str] = field(default_factory=list)
    logits: np.ndarray | None = field(default=None, compare=False)
    cumulative_logprob: float | None = None

    def __post_init__(self) -> None:
        if self.finish_reason is not None and self.finish_reason not in FINISH_REASONS:
            raise ValueError(
                f"CompletionOutput.finish_reason must be None or one of {FINISH_REASONS}, "
                f"got {self.finish_reason!r}"
            )
        if self.logits is not None:
            _check_rows(self.logits)

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """Output of one request: cumulative, or a delta (see `RequestOutputKind`).
    `fingerprint` identifies the deployment that ran it.

    `prompt_logprobs` (with `SamplingParams.prompt_logprobs=k`, else None) is aligned with
    `prompt_token_ids`: entry 0 is None, entry p maps the prompt token p (first) and the top
    k ids to their log-probabilities in the raw logits row of position p - 1.
    """

    request_id: str
    prompt: str | None
    prompt_token_ids: list[int]
    outputs: list[CompletionOutput]
    finished: bool
    fingerprint: str
    prompt_logprobs: list[dict[int, float] | None] | None = None


def _check_rows(rows: np.ndarray) -> None:
    if not isinstance(rows, np.ndarray) or rows.ndim != 2:
        raise ValueError(f"logits must be a 2-D numpy array [n, vocab], got {describe_value(rows)}")
    if rows.dtype.kind != "f" or rows.dtype.itemsize != 4:
        raise ValueError(f"logits must have dtype float32, got {rows.dtype}")


def describe_value(value: object) -> str:
    """What `value` is, for an error message: an array's shape and dtype, else its type."""
    if isinstance(value, np.ndarray):
        return f"array of shape {value.shape} and dtype {value.dtype}"
    return type(value).__name__
