"""OutputProcessor: each request's output state (vLLM v1's `RequestState`), and what turns
a step's sampled tokens and rows into `RequestOutput`s: detokenization, stop strings,
grammar completion, digests, logprobs, returned rows, prompt logprobs, held final outputs.
Torch-free.

Invariants: a request's output never skips a digest (one per output token, in order; the
runner's device digest or the SHA-256 of the host row: the same string); streamed text only
grows; what is reported (`output_kind`) never changes what is sampled. An exception in one
request's work is handed to `fail(request_id, exc)` (the engine aborts that request only).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from samebits.detokenizer import IncrementalDetokenizer, find_stop_string, truncate_at_stop
from samebits.engine.request import Request
from samebits.engine.row_workers import all_done, digest_later, map_rows, resolved
from samebits.engine.step_result import StepLogits
from samebits.outputs import CompletionOutput, RequestOutput, RequestOutputKind, logits_digest
from samebits.sampling import SamplingParams, compute_logprobs, is_plain_greedy
from samebits.structured.matcher import GrammarMatcher

PromptLogprobs = list[dict[int, float] | None]
Failure = Callable[[str, Exception], None]

# Steps whose SHA-256 digests may still be computing on the row workers (each pins its
# step's host rows, 512 KB per 128k-vocab row) before a step waits for the oldest. An
# output waits for its own digests, so this bounds memory, never what is reported.
DIGEST_STEPS_AHEAD = 4
# The same bound for digests computed on the device (32 bytes per row come back; each step
# holds a device copy of its rows until hashed): one step per digest stream.
DEVICE_DIGEST_STEPS_AHEAD = 8


@dataclass
class RequestState:
    """Per-request output bookkeeping the scheduler does not need.

    CUMULATIVE / FINAL_ONLY: `digests`, `logprobs`, `logits` hold every position. DELTA: they
    hold the positions not handed out yet (each output takes them and leaves fresh lists);
    `sent_tokens` / `sent_text` count the tokens and characters already handed out.
    """

    request: Request
    params: SamplingParams
    prompt: str | None
    detok: IncrementalDetokenizer
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    prompt_ids_out: list[int] = field(default_factory=list)  # DELTA: shared by its outputs
    sent_tokens: int = 0
    sent_text: int = 0
    # str or future-like (`result()`: a row worker's or the device's), resolved in outputs
    digests: list = field(default_factory=list)
    logprobs: list[dict[int, float]] = field(default_factory=list)
    logits: list[np.ndarray] = field(default_factory=list)
    cumulative_logprob: float = 0.0
    text: str = ""
    stop_reason: str | int | None = None
    prompt_logprobs: PromptLogprobs | None = None  # [None, lp(1), ...] as rows arrive
    guide: GrammarMatcher | None = None  # structured outputs: has accepted every output

    @property
    def needs_rows(self) -> bool:
        """Whether the request keeps more of a sampled row than its digest."""
        return self.params.logprobs is not None or self.params.return_logits

    @property
    def takes_argmax(self) -> bool:
        """Whether the next token is its row's argmax (plain greedy, no grammar)."""
        position = len(self.request.output_token_ids)
        return self.guide is None and is_plain_greedy(self.params, position, None)

    @property
    def seed(self) -> int:
        """The request's seed (assigned at admission: never None here)."""
        if self.params.seed is None:
            raise AssertionError(f"request {self.request.request_id} has no seed")
        return self.params.seed


class OutputProcessor:
    """The live requests' `RequestState`s (insertion order: admission order) and their
    outputs. `fingerprint` goes into every output; `fail` aborts one request."""

    def __init__(self, tokenizer: Any, fingerprint: str, fail: Failure) -> None:
        self.tokenizer = tokenizer
        self.fingerprint = fingerprint
        self._fail = fail
        self.request_states: dict[str, RequestState] = {}
        # finished FINAL_ONLY requests whose digests are still computing: their output is
        # built by a later step (in finishing order) instead of stalling this one
        self.held: dict[str, None] = {}
        self.num_held_outputs = 0
        self._digest_steps: deque[list] = deque()  # digests still being computed

    # ------------------------------------------------------------------ requests
    def add_request(
        self, request: Request, params: SamplingParams, prompt: str | None,
        output_kind: RequestOutputKind, guide: GrammarMatcher | None,
    ) -> None:  # fmt: skip
        detok = IncrementalDetokenizer(self.tokenizer, params.skip_special_tokens)
        state = RequestState(request, params, prompt, detok, output_kind, guide=guide)
        if output_kind is RequestOutputKind.DELTA:
            state.prompt_ids_out = list(request.prompt_token_ids)
        if params.prompt_logprobs is not None:
            state.prompt_logprobs = [None]
        self.request_states[request.request_id] = state

    def abort_request(self, rid: str) -> bool:
        """Drop the request's state (and a held output); whether it was live."""
        self.held.pop(rid, None)
        return self.request_states.pop(rid, None) is not None

    def drop_finished(self, finished: set[str]) -> None:
        """Forget the finished requests whose output is not held."""
        for rid in finished:
            if rid not in self.held:
                self.request_states.pop(rid, None)

    def streams(self, rids: Iterable[str]) -> bool:
        """Whether one of these requests reports before it finishes (not FINAL_ONLY)."""
        states = (self.request_states.get(rid) for rid in rids)
        final = RequestOutputKind.FINAL_ONLY
        return any(st.output_kind is not final for st in states if st is not None)

    # ------------------------------------------------------------------ stop conditions
    def stops(self, rid: str, token: int) -> bool:
        """Whether `token` ends the request on a stop string or a complete grammar (the
        token is detokenized here only when stop strings need the text)."""
        st = self.request_states[rid]
        return bool(st.params.stop and self._apply_stop_strings(st, token)) or (
            st.guide is not None and st.guide.terminated
        )

    def _append_text(self, st: RequestState, token: int) -> int:
        """Detokenize `token`; returns where the stop-string search should start."""
        start = len(st.detok.text)
        st.detok.append(token)
        st.text = st.detok.text
        return start

    def _apply_stop_strings(self, st: RequestState, token: int) -> bool:
        start = self._append_text(st, token)
        if not st.params.stop or len(st.request.output_token_ids) <= st.params.min_tokens:
            return False  # vLLM: stop strings count only after more than min_tokens outputs
        hit = find_stop_string(st.detok.text, st.params.stop, start)
        if hit is None:
            return False
        index, stop = hit
        st.text = truncate_at_stop(st.detok.text, index, stop, st.params.include_stop_str_in_output)
        st.stop_reason = stop
        return True

    # ------------------------------------------------------------------ rows and digests
    def record_rows(
        self, rows: StepLogits, device: Mapping[str, Any] | None, sampled: dict[str, int]
    ) -> None:
        """Fold a step's rows into the records: prompt logprobs of `all_rows` chunks, then
        each sampled row's digest (`device`'s, else hashed from the host row on the row
        workers), logprobs and copy."""
        states = self.request_states
        starts = {rid: start for rid, (start, _) in rows.chunk_rows.items()}
        chunks = [(rid, r) for rid, (_, r) in rows.chunk_rows.items() if rid in states]
        self._each(lambda rid, r: self._prompt_logprobs(rid, starts[rid], r), chunks)
        live = [rid for rid in sampled if rid in states]
        pending = []
        for rid in live:
            digest = device[rid] if device is not None else digest_later(logits_digest, rows[rid])
            states[rid].digests.append(digest)
            if not isinstance(digest, str):
                pending.append(digest)
        self._bound_digests_ahead(
            pending, DIGEST_STEPS_AHEAD if device is None else DEVICE_DIGEST_STEPS_AHEAD
        )
        items = [(rid, rows[rid]) for rid in live if states[rid].needs_rows]
        self._each(lambda rid, row: self._record(rid, row, sampled[rid]), items)

    def _each(
        self, work: Callable[[str, np.ndarray], None], items: list[tuple[str, np.ndarray]]
    ) -> None:
        """`work(rid, rows)` for each item (on the row workers when large); a request whose
        work raised is failed."""
        for (rid, _), err in zip(items, map_rows(work, items), strict=True):
            if err is not None:
                self._fail(rid, err)

    def _bound_digests_ahead(self, pending: list, limit: int) -> None:
        """Keep the digests of at most `limit` steps in flight (each holds its step's host
        rows or device buffers): wait for the oldest beyond that."""
        self._digest_steps.append(pending)
        while len(self._digest_steps) > limit:
            resolved(self._digest_steps.popleft())

    def _prompt_logprobs(self, rid: str, start: int, rows: np.ndarray) -> None:
        """Fold a chunk's rows into the request's prompt logprobs: the row at prompt position
        p gives entry p + 1 (logprob of prompt token p + 1 and the top k, by
        `compute_logprobs`, as for sampled tokens). Rows already folded in (a recomputed
        chunk after a preemption) and rows past the prompt are skipped."""
        st = self.request_states[rid]
        lps, prompt = st.prompt_logprobs, st.request.prompt_token_ids
        k = st.params.prompt_logprobs
        if lps is None or k is None:
            return
        for position in range(start, start + len(rows)):
            if position + 1 >= len(prompt):
                break
            if position + 1 == len(lps):
                lps.append(compute_logprobs(rows[position - start], prompt[position + 1], k))

    def _record(self, rid: str, row: np.ndarray, token: int) -> None:
        """The sampled row's logprobs and copy (as the request asks)."""
        st = self.request_states[rid]
        if st.params.logprobs is not None:
            lp = compute_logprobs(row, token, st.params.logprobs)
            st.logprobs.append(lp)
            st.cumulative_logprob += lp[token]
        if st.params.return_logits:
            st.logits.append(row.copy())

    # ------------------------------------------------------------------ outputs
    def emit(self, rid: str, token: int, finished: set[str]) -> RequestOutput | None:
        """Detokenize the new token (unless `stops` did) and build the request's output
        (None for an unfinished FINAL_ONLY request, and for a finished one whose digests are
        still computing on the device or the row workers: held, built by a later step)."""
        st = self.request_states[rid]
        if st.detok.num_tokens < len(st.request.output_token_ids):
            self._append_text(st, token)
        done = rid in finished
        if st.output_kind is RequestOutputKind.FINAL_ONLY:
            if not done:
                return None
            if not all_done(st.digests):
                self.held[rid] = None
                self.num_held_outputs += 1
                return None
        return self._output(rid, done)

    def release_held(self, wait: bool) -> list[RequestOutput]:
        """The final outputs of the held requests, in the order they finished, up to the first
        whose digests are still computing (`wait`: all, waiting for their digests)."""
        ready = []
        for rid in self.held:
            if not (wait or all_done(self.request_states[rid].digests)):
                break
            ready.append(rid)
        outputs = []
        for rid in ready:
            del self.held[rid]
            out = self.isolated(rid, self._output, rid, True)
            self.request_states.pop(rid, None)
            if out is not None:
                outputs.append(out)
        return outputs

    def isolated(self, rid: str, work: Callable[..., Any], *args: Any) -> Any:
        """work(*args), or None after failing `rid` if it raised."""
        try:
            return work(*args)
        except Exception as exc:  # noqa: BLE001 - isolate one request's failure
            self._fail(rid, exc)
            return None

    def _output(self, rid: str, finished: bool) -> RequestOutput:
        st = self.request_states[rid]
        if finished and st.stop_reason is None:
            st.detok.flush()
            st.text = st.detok.text
        shown = len(st.text) if finished else _shown_length(st.text, st.params.stop)
        if st.output_kind is RequestOutputKind.DELTA:
            return self._delta_output(rid, st, finished, shown)
        req = st.request
        if len(st.digests) != len(req.output_token_ids):  # a digest is never skipped
            raise AssertionError(
                f"output of {rid}: {len(req.output_token_ids)} tokens, {len(st.digests)} digests"
            )
        logits = np.stack(st.logits) if st.params.return_logits and st.logits else None
        logprobs = list(st.logprobs) if st.params.logprobs is not None else None
        completion = self._completion(st, finished, st.text[:shown], list(req.output_token_ids),
                                      st.digests, logprobs, logits)  # fmt: skip
        prompt_lps = _complete_prompt_logprobs(st.prompt_logprobs, len(req.prompt_token_ids))
        prompt_ids = list(req.prompt_token_ids)
        return self._request_output(st, finished, completion, prompt_ids, prompt_lps)

    def _delta_output(
        self, rid: str, st: RequestState, finished: bool, shown: int
    ) -> RequestOutput:
        """What is new since the request's previous output: O(new), nothing is copied from
        earlier positions. The pending digests / logprobs / rows are handed over as they are
        (fresh lists are left), the token ids and text are the unsent slices."""
        req = st.request
        new_tokens = req.output_token_ids[st.sent_tokens :]
        if len(st.digests) != len(new_tokens) or shown < st.sent_text:
            raise AssertionError(
                f"delta output of {rid}: {len(new_tokens)} new tokens but {len(st.digests)} "
                f"digests, or the text went back ({shown} < {st.sent_text} characters)"
            )
        first = st.sent_tokens == 0
        digests, st.digests = st.digests, []
        logprobs, logits = None, None
        if st.params.logprobs is not None:
            logprobs, st.logprobs = st.logprobs, []
        if st.params.return_logits and st.logits:
            logits, st.logits = np.stack(st.logits), []
        text = st.text[st.sent_text : shown]
        st.sent_tokens += len(new_tokens)
        st.sent_text = shown
        completion = self._completion(st, finished, text, new_tokens, digests, logprobs, logits)
        prompt_lps = None
        if first:
            prompt_lps = _complete_prompt_logprobs(st.prompt_logprobs, len(req.prompt_token_ids))
        return self._request_output(st, finished, completion, st.prompt_ids_out, prompt_lps)

    @staticmethod
    def _completion(
        st: RequestState, finished: bool, text: str, token_ids: list[int], digests: list,
        logprobs: list | None, logits: np.ndarray | None,
    ) -> CompletionOutput:  # fmt: skip
        req = st.request
        return CompletionOutput(
            index=0,
            text=text,
            token_ids=token_ids,
            logprobs=logprobs,
            finish_reason=req.finish_reason if finished else None,
            stop_reason=st.stop_reason if st.stop_reason is not None else req.stop_reason,
            seed=st.seed,
            logits_digests=resolved(digests),
            logits=logits,
            cumulative_logprob=st.cumulative_logprob if st.params.logprobs is not None else None,
        )

    def _request_output(
        self, st: RequestState, finished: bool, completion: CompletionOutput,
        prompt_ids: list[int], prompt_logprobs: PromptLogprobs | None,
    ) -> RequestOutput:  # fmt: skip
        return RequestOutput(
            request_id=st.request.request_id,
            prompt=st.prompt,
            prompt_token_ids=prompt_ids,
            outputs=[completion],
            finished=finished,
            fingerprint=self.fingerprint,
            prompt_logprobs=prompt_logprobs,
        )


def _complete_prompt_logprobs(lps: PromptLogprobs | None, num_prompt: int):
    """A copy of the prompt logprobs once every prompt position has its entry (they are, by
    the time a request has an output: its sampled row comes from the last prompt chunk)."""
    if lps is None:
        return None
    if len(lps) != num_prompt:
        raise AssertionError(f"prompt logprobs cover {len(lps)} of {num_prompt} positions")
    return list(lps)


def _shown_length(text: str, stops) -> int:
    """While running, hide the last len(longest stop) - 1 characters: they may start a stop
    string, and streamed text must only ever grow (the final text is cut at the stop, never
    before what was shown: a stop found now ends in the new text, so it starts in the held
    back part). Never negative: a text shorter than the hold shows nothing."""
    hold = max((len(s) for s in stops), default=1) - 1
    return max(0, len(text) - hold)
