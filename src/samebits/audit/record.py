"""The audit entry of one served engine request (one choice of an API call).

Fields of a `request` entry (besides `seq`, `prev_hash`, `entry_hash` added by the writer):
`fingerprint`, `model`, `request_id`, `endpoint`, `user`, `received_at`, `finished_at`
(Unix seconds), `prompt_token_ids`, `sampling_params` (the full `SamplingParams.to_dict()`
with the seed actually used, `n == 1`), `output_token_ids`, `logits_digests` (hex SHA-256
of each position's float32 logits row, see `samebits.outputs`) and `finish_reason`; a chat
request with tools also has `tools`: `{"tools", "tool_choice", "parallel_tool_calls",
"tool_call_parser"}` (they shaped the prompt, and a forced choice's grammar is in
`sampling_params.structured_outputs`), its `tools` the JSON text of the tools list (key
order kept: a schema's property order is the order the arguments are generated in).
A `session` entry marks a server start: `fingerprint`, `model`, `engine_args`, `started_at`.
Both kinds carry `numerics_id` (what fixes the bits, without the machine: see
`samebits.kernels.fingerprint.numerics_id`) when the server knows it; entries written before
it existed have none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ENTRY_FORMAT = 1


@dataclass(frozen=True)
class ServedRequest:
    """What the server knows about one engine request once it ended."""

    request_id: str
    endpoint: str
    user: str | None
    received_at: float
    finished_at: float
    prompt_token_ids: Sequence[int]
    sampling_params: Mapping[str, Any]
    output_token_ids: Sequence[int]
    logits_digests: Sequence[str]
    finish_reason: str | None
    tools: Mapping[str, Any] | None = None


def request_record(
    served: ServedRequest, fingerprint: str, model: str, numerics_id: str | None = None
) -> dict[str, Any]:
    """The JSON record of `served` (before sealing into the chain)."""
    record = {
        "type": "request",
        "format": ENTRY_FORMAT,
        "fingerprint": fingerprint,
        "model": model,
        "request_id": served.request_id,
        "endpoint": served.endpoint,
        "user": served.user,
        "received_at": served.received_at,
        "finished_at": served.finished_at,
        "prompt_token_ids": [int(t) for t in served.prompt_token_ids],
        "sampling_params": dict(served.sampling_params),
        "output_token_ids": [int(t) for t in served.output_token_ids],
        "logits_digests": [str(d) for d in served.logits_digests],
        "finish_reason": served.finish_reason,
    }
    if served.tools is not None:
        record["tools"] = dict(served.tools)
    return _with_numerics(record, numerics_id)


def session_record(
    fingerprint: str, model: str, engine_args: Mapping[str, Any], started_at: float,
    numerics_id: str | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The JSON record written when a server starts appending to the log."""
    record = {
        "type": "session",
        "format": ENTRY_FORMAT,
        "event": "start",
        "fingerprint": fingerprint,
        "model": model,
        "engine_args": dict(engine_args),
        "started_at": started_at,
    }
    return _with_numerics(record, numerics_id)


def _with_numerics(record: dict[str, Any], numerics_id: str | None) -> dict[str, Any]:
    """`record` with its `numerics_id` field (left out when unknown, as in older entries)."""
    if numerics_id:
        record["numerics_id"] = numerics_id
    return record
