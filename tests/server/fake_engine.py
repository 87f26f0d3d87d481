"""A small engine that honours the `LLMEngine` contract, for fast server and audit tests.

Token ids are UTF-8 bytes (0-255) plus specials (256 BOS, 257 EOS). The logits "row" at each
position is represented by its digest: SHA-256 over the fingerprint, the seed, the sampler
fields and the whole history (prompt + outputs so far), so outputs depend only on the
request's own inputs, never on batching. The token drawn at a position is a printable ASCII
byte chosen from that digest (EOS with probability ~1/32 unless `ignore_eos`).
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

from samebits.outputs import CompletionOutput, RequestOutput, RequestOutputKind
from samebits.sampling import SamplingParams, new_seed

BOS, EOS = 256, 257
BOOM = "\x01boom"  # a prompt the tokenizer fails on (an exception inside one request)


class FakeTokenizer:
    vocab_size = 258
    eos_token_ids = (EOS,)
    bos_token_id = BOS

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if text == BOOM:
            raise RuntimeError("injected tokenizer failure")
        ids = list(text.encode("utf-8"))
        return [BOS, *ids] if add_special_tokens else ids

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        data = bytearray()
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"token id {i} is outside [0, {self.vocab_size})")
            if i < 256:
                data.append(i)
            elif not skip_special_tokens:
                data += b"<s>" if i == BOS else b"</s>"
        return data.decode("utf-8", errors="replace")

    def token_to_str(self, token_id: int) -> str:
        return self.decode([token_id], skip_special_tokens=False)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        text = "".join(f"[{m['role']}] {m['content']}\n" for m in messages)
        return text + ("[assistant] " if add_generation_prompt else "")


class FakeStepError(RuntimeError):
    """Raised by `step()` for one request (carries its id, like the contract asks)."""

    def __init__(self, request_id: str) -> None:
        super().__init__(f"injected failure in request {request_id}")
        self.request_id = request_id


@dataclass
class _Req:
    request_id: str
    prompt: str | None
    prompt_ids: list[int]
    params: SamplingParams
    seed: int
    outputs: list[int] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    logprobs: list[dict[int, float]] = field(default_factory=list)
    output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE
    sent_tokens: int = 0  # DELTA: tokens and characters handed out so far
    sent_text: int = 0


class FakeEngine:
    """Deterministic stand-in for `LLMEngine` (no model)."""

    def __init__(
        self,
        fingerprint: str = "fake-fingerprint-0",
        max_num_seqs: int = 8,
        max_model_len: int = 256,
        step_delay: float = 0.0,
        fail_token: int | None = None,
        salt: str = "",
    ) -> None:
        self.tokenizer = FakeTokenizer()
        self.model_name = "fake-model"
        self.fingerprint = fingerprint
        self.max_model_len = max_model_len
        self.vocab_size = self.tokenizer.vocab_size
        self.max_num_seqs = max_num_seqs
        self.step_delay = step_delay
        self.fail_token = fail_token
        self.salt = salt  # a non-empty salt models a different (e.g. perturbed) model
        self.requests: dict[str, _Req] = {}
        self.aborted: list[str] = []
        self.batch_sizes: list[int] = []
        self.steps = 0

    def add_request(
        self, request_id, prompt_token_ids, params, prompt=None,
        output_kind=RequestOutputKind.CUMULATIVE,
    ) -> None:  # fmt: skip
        ids = list(prompt_token_ids)
        if not ids:
            raise ValueError("prompt_token_ids is empty")
        if request_id in self.requests:
            raise ValueError(f"duplicate request_id {request_id!r}")
        if len(ids) + params.max_tokens > self.max_model_len:
            raise ValueError(f"prompt + max_tokens exceeds max_model_len {self.max_model_len}")
        if any(not 0 <= t < self.vocab_size for t in ids):
            raise ValueError("token id out of range")
        if params.n != 1:
            raise ValueError("params.n must be 1")
        seed = params.seed if params.seed is not None else new_seed()
        self.requests[request_id] = _Req(
            request_id, prompt, ids, params, seed, output_kind=output_kind
        )

    def abort_request(self, request_id: str) -> None:
        if self.requests.pop(request_id, None) is not None:
            self.aborted.append(request_id)

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def pop_failures(self) -> dict[str, Exception]:
        """The contract's per-request failure report; this engine isolates none."""
        return {}

    def stats(self) -> dict[str, float]:
        return {"num_waiting": max(0, len(self.requests) - self.max_num_seqs), "preemptions": 0}

    def step(self) -> list[RequestOutput]:
        if self.step_delay:
            time.sleep(self.step_delay)
        batch = list(self.requests.values())[: self.max_num_seqs]
        self.batch_sizes.append(len(batch))
        self.steps += 1
        for req in batch:  # before any request advances: DELTA outputs are never lost
            if self.fail_token is not None and self.fail_token in req.prompt_ids:
                raise FakeStepError(req.request_id)
        return [self._advance(req) for req in batch]

    def digest(self, req: _Req, position: int) -> str:
        history = req.prompt_ids + req.outputs[:position]
        state = req.params.with_seed(req.seed).sampler_state()
        text = f"{self.salt}|{self.fingerprint}|{state}|{history}"
        return hashlib.sha256(text.encode()).hexdigest()

    def _advance(self, req: _Req) -> RequestOutput:
        digest = self.digest(req, len(req.outputs))
        raw = bytes.fromhex(digest)
        token = 32 + raw[0] % 95
        if raw[1] < 8 and not req.params.ignore_eos:
            token = EOS
        req.outputs.append(token)
        req.digests.append(digest)
        req.logprobs.append(_logprobs(raw, token))
        reason = self._finish_reason(req)
        text = self._text(req)
        if reason is not None:
            del self.requests[req.request_id]
        return self._output(req, text, reason)

    def _finish_reason(self, req: _Req) -> str | None:
        if req.outputs[-1] == EOS and not req.params.ignore_eos:
            return "stop"
        if any(s in self.tokenizer.decode(req.outputs) for s in req.params.stop):
            return "stop"
        return "length" if len(req.outputs) >= req.params.max_tokens else None

    def _text(self, req: _Req) -> str:
        text = self.tokenizer.decode(req.outputs)
        for stop in req.params.stop:
            if stop in text:
                text = text[: text.index(stop)]
        return text

    def _output(self, req: _Req, text: str, reason: str | None) -> RequestOutput:
        start = 0
        if req.output_kind is RequestOutputKind.DELTA:  # the slices past what was handed out
            start, req.sent_tokens = req.sent_tokens, len(req.outputs)
            hold = max((len(s) for s in req.params.stop), default=1) - 1
            end = len(text) if reason is not None else max(0, len(text) - hold)
            text, req.sent_text = text[req.sent_text : end], end
        choice = CompletionOutput(
            index=0,
            text=text,
            token_ids=req.outputs[start:],
            logprobs=req.logprobs[start:] if req.params.logprobs is not None else None,
            finish_reason=reason,
            stop_reason=None,
            seed=req.seed,
            logits_digests=req.digests[start:],
        )
        return RequestOutput(
            req.request_id, req.prompt, list(req.prompt_ids), [choice], reason is not None,
            self.fingerprint,
        )  # fmt: skip


def _logprobs(raw: bytes, token: int) -> dict[int, float]:
    top = {32 + raw[i] % 95: -float(raw[i + 8]) / 16.0 for i in range(2, 7)}
    return {token: -float(raw[20]) / 32.0, **{t: v for t, v in top.items() if t != token}}
