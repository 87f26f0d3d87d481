"""`Request` and `RequestStatus`: one generation request as the engine core sees it.

Pure Python (no torch, no numpy). A request carries its prompt, the tokens generated so far,
how far its K/V has been computed (`num_computed_tokens`) and its stop conditions as plain
fields; the sampling parameters ride along as an opaque `params` payload for the engine.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from samebits.engine.prefix_hash import BlockHash


class RequestStatus(enum.Enum):
    """Lifecycle of a request. WAITING/PREEMPTED requests sit in the scheduler's waiting queue
    and hold no KV blocks; RUNNING requests hold blocks; FINISHED_* requests hold nothing."""

    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_STOPPED = "finished_stopped"
    FINISHED_LENGTH = "finished_length"
    FINISHED_ABORTED = "finished_aborted"

    @property
    def is_finished(self) -> bool:
        return self in _FINISH_REASONS


_TOKEN_LIMIT = 2**63

_FINISH_REASONS = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}


@dataclass(eq=False)
class Request:
    """One request. Invariants: `prompt_token_ids` is a non-empty tuple of non-negative ints;
    `0 <= num_computed_tokens <= num_tokens + num_output_placeholders`; `all_token_ids ==
    prompt + output`; the `block_hashes` cache only ever holds hashes of full blocks of
    `all_token_ids`, in order.

    Stop conditions: a sampled token in `eos_token_ids` (unless `ignore_eos`) or in
    `stop_token_ids` stops the request once `min_tokens` outputs exist; `max_tokens` outputs or
    `num_tokens >= max_model_len` end it with FINISHED_LENGTH. `max_model_len=None` means the
    scheduler's limit (it fills the field in at `add_request`).

    `needs_prompt_rows` (prompt logprobs asked): the scheduler asks the runner for the logits
    of every row of the request's prompt chunks and never gives it a prefix-cache hit (a hit
    skips computing those rows).
    """

    request_id: str
    prompt_token_ids: Sequence[int]
    max_tokens: int
    eos_token_ids: tuple[int, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0
    max_model_len: int | None = None
    params: object = None
    seed: int = 0
    needs_prompt_rows: bool = False
    output_token_ids: list[int] = field(init=False, default_factory=list)
    status: RequestStatus = field(init=False, default=RequestStatus.WAITING)
    num_computed_tokens: int = field(init=False, default=0)
    arrival_index: int = field(init=False, default=-1)
    block_hashes: list[BlockHash] = field(init=False, default_factory=list, repr=False)
    stop_reason: int | str | None = field(init=False, default=None)
    # tokens sampled by a step whose successor was scheduled ahead (`Scheduler.schedule_ahead`)
    # but not appended yet: the KV cache may cover them, `all_token_ids` does not
    num_output_placeholders: int = field(init=False, default=0)
    _all_token_ids: list[int] = field(init=False, default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.request_id, str) or not self.request_id:
            raise ValueError(f"request_id must be a non-empty str, got {self.request_id!r}")
        self.prompt_token_ids = _token_tuple("prompt_token_ids", self.prompt_token_ids)
        if not self.prompt_token_ids:
            raise ValueError(f"request {self.request_id!r}: prompt_token_ids must not be empty")
        self.eos_token_ids = _token_tuple("eos_token_ids", self.eos_token_ids)
        self.stop_token_ids = _token_tuple("stop_token_ids", self.stop_token_ids)
        _check_int("max_tokens", self.max_tokens, 1)
        _check_int("min_tokens", self.min_tokens, 0)
        _check_int("seed", self.seed, None)
        if self.max_model_len is not None:
            _check_int("max_model_len", self.max_model_len, 1)
        for name in ("ignore_eos", "needs_prompt_rows"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")
        self._all_token_ids = list(self.prompt_token_ids)

    @property
    def all_token_ids(self) -> Sequence[int]:
        """Prompt followed by outputs. Read-only view by convention: do not mutate."""
        return self._all_token_ids

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.output_token_ids)

    @property
    def num_tokens(self) -> int:
        return len(self._all_token_ids)

    @property
    def is_finished(self) -> bool:
        return self.status.is_finished

    @property
    def finish_reason(self) -> str | None:
        """One of "stop", "length", "abort" once finished, else None (OpenAI/vLLM names)."""
        return _FINISH_REASONS.get(self.status)

    def append_output_token_id(self, token_id: int) -> None:
        """Record one sampled token (its K/V is computed in a later step); it fills a
        placeholder when one is outstanding."""
        _token_tuple("token_id", (token_id,))
        if self.num_output_placeholders:
            self.num_output_placeholders -= 1
        self.output_token_ids.append(token_id)
        self._all_token_ids.append(token_id)

    def check_stop(self, token_id: int) -> RequestStatus | None:
        """The finished status the just-appended `token_id` implies, or None to continue.
        Stop tokens win over length limits; sets `stop_reason` for a stop_token_ids hit."""
        if self.num_output_tokens >= self.min_tokens:
            if not self.ignore_eos and token_id in self.eos_token_ids:
                return RequestStatus.FINISHED_STOPPED
            if token_id in self.stop_token_ids:
                self.stop_reason = token_id
                return RequestStatus.FINISHED_STOPPED
        if self.num_output_tokens >= self.max_tokens:
            return RequestStatus.FINISHED_LENGTH
        if self.max_model_len is not None and self.num_tokens >= self.max_model_len:
            return RequestStatus.FINISHED_LENGTH
        return None


def _token_tuple(name: str, values: Sequence[int]) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)):
        raise ValueError(f"{name} must be a sequence of ints, got {type(values).__name__}")
    out = tuple(values)
    for value in out:
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < _TOKEN_LIMIT:
            raise ValueError(f"{name} must hold ints in [0, 2**63), got {value!r}")
    return out


def _check_int(name: str, value: object, lo: int | None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{name} must be an int, got {value!r}")
    if lo is not None and value < lo:
        raise ValueError(f"{name} must be >= {lo}, got {value}")
