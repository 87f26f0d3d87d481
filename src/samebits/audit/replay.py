"""Re-executing one logged request alone and comparing it bit for bit.

The replay is a fresh engine request with the logged prompt token ids and the logged
sampler state (seed included), run with no other request in the engine. A finished entry
passes when the replay yields exactly the logged token ids and logits digests; an aborted
entry (client gone mid-generation) passes when its tokens and digests are a prefix of the
replay (the replay then stops after as many tokens, since `max_tokens` only truncates).
Digests are hex SHA-256 of the float32 rows, so equal strings mean equal bytes. An entry
of a tool request whose forced grammar is not the one its logged tools give fails before
any replay (`tools_check.py`; checked when the engine has a `tokenizer`). An engine with
`expect` (`audit/forced.py`) is told the logged tokens first: it computes the rows by
teacher-forced passes, the same bits, and still samples and stops on its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from samebits.audit.reader import LoggedEntry
from samebits.audit.tools_check import tools_problem
from samebits.sampling import SamplingParams


class ReplayEngine(Protocol):
    """The part of `LLMEngine` the verifier uses."""

    fingerprint: str

    def add_request(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams
    ) -> None: ...

    def step(self) -> list[Any]: ...

    def has_unfinished_requests(self) -> bool: ...

    def abort_request(self, request_id: str) -> None: ...


@dataclass(frozen=True)
class ReplayResult:
    """Verdict on one entry. `mismatch_at` is the first differing output position, if any."""

    seq: int
    where: str
    ok: bool
    message: str
    num_tokens: int
    mismatch_at: int | None = None


def replay_entry(engine: ReplayEngine, logged: LoggedEntry) -> ReplayResult:
    """Re-execute `logged` alone on `engine` and compare every token and digest."""
    entry = logged.entry
    try:
        prompt, params, tokens, digests = _inputs_of(entry)
    except (KeyError, TypeError, ValueError) as exc:
        return _result(logged, False, f"entry unusable for replay: {exc}", 0)
    tokenizer = getattr(engine, "tokenizer", None)
    problem = tools_problem(entry, tokenizer) if tokenizer is not None else None
    if problem is not None:
        return _result(logged, False, problem, len(tokens))
    aborted = entry.get("finish_reason") == "abort"
    if aborted and not tokens:
        return _result(logged, True, "aborted before any token (nothing to compare)", 0)
    if aborted:
        params = SamplingParams.from_dict({**params.to_dict(), "max_tokens": len(tokens)})
    request_id = f"verify-{entry['seq']}"
    expect = getattr(engine, "expect", None)  # a teacher-forced engine (audit/forced.py)
    try:
        if expect is not None:
            expect(request_id, prompt, tokens, params.prompt_logprobs is not None)
        got_tokens, got_digests = run_alone(engine, request_id, prompt, params)
    except Exception as exc:  # the engine refused or failed: this entry fails, the run goes on
        _abort_quietly(engine, request_id)
        return _result(logged, False, f"replay failed: {type(exc).__name__}: {exc}", len(tokens))
    finally:
        if expect is not None:
            engine.forget(request_id)  # type: ignore[attr-defined]
    return _compare(logged, tokens, digests, got_tokens, got_digests, prefix=aborted)


def run_alone(
    engine: ReplayEngine, request_id: str, prompt: list[int], params: SamplingParams
) -> tuple[list[int], list[str]]:
    """Run one request to completion with nothing else in the engine."""
    if engine.has_unfinished_requests():
        raise RuntimeError("run_alone: the engine already has unfinished requests")
    engine.add_request(request_id, prompt, params)
    final = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.request_id == request_id and out.finished:
                final = out
    if final is None:
        raise RuntimeError(f"run_alone: request {request_id!r} never finished")
    choice = final.outputs[0]
    return list(choice.token_ids), [str(d) for d in choice.logits_digests]


def _inputs_of(entry: dict[str, Any]) -> tuple[list[int], SamplingParams, list[int], list[str]]:
    prompt = [int(t) for t in entry["prompt_token_ids"]]
    params = SamplingParams.from_dict(entry["sampling_params"])
    if params.seed is None:
        raise ValueError("sampling_params.seed is missing")
    tokens = [int(t) for t in entry["output_token_ids"]]
    digests = [str(d) for d in entry["logits_digests"]]
    if len(tokens) != len(digests):
        raise ValueError(f"{len(tokens)} output tokens but {len(digests)} logits digests")
    return prompt, params, tokens, digests


def _compare(
    logged: LoggedEntry,
    tokens: Sequence[int],
    digests: Sequence[str],
    got_tokens: Sequence[int],
    got_digests: Sequence[str],
    prefix: bool,
) -> ReplayResult:
    n = len(tokens)
    for i in range(min(n, len(got_tokens))):
        if digests[i] != got_digests[i]:
            return _result(logged, False, f"logits digest differs at position {i}", n, i)
        if tokens[i] != got_tokens[i]:
            msg = f"token differs at position {i} (logged {tokens[i]}, replayed {got_tokens[i]})"
            return _result(logged, False, msg, n, i)
    short = len(got_tokens) < n
    if short or (not prefix and len(got_tokens) != n):
        msg = f"replay generated {len(got_tokens)} tokens, the log has {n}"
        return _result(logged, False, msg, n, min(n, len(got_tokens)))
    return _result(logged, True, f"{n} tokens match", n)


def _result(
    logged: LoggedEntry, ok: bool, message: str, n: int, at: int | None = None
) -> ReplayResult:
    return ReplayResult(int(logged.entry.get("seq", -1)), logged.where, ok, message, n, at)


def _abort_quietly(engine: ReplayEngine, request_id: str) -> None:
    with contextlib.suppress(Exception):  # best effort: the engine is already in trouble
        engine.abort_request(request_id)
