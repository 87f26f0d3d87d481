"""`LLM`: the offline API (vLLM-style names) on top of `LLMEngine`."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from typing import Any

from samebits.config import EngineConfig
from samebits.engine.engine import LLMEngine
from samebits.outputs import RequestOutput, RequestOutputKind
from samebits.sampling import SamplingParams, new_seed

Prompt = str | Sequence[int]


class LLM:
    """Offline generation. Invariant: each output equals what the same prompt and sampler
    state produce alone (a prefix of the spec's Ref), whatever else is in the batch."""

    def __init__(
        self, model: str | None = None, *, config: EngineConfig | None = None,
        engine: LLMEngine | None = None, progress: bool = False, **kwargs: Any,
    ) -> None:  # fmt: skip
        """`LLM(model, **kwargs)` as in vLLM: `kwargs` are the flat engine options
        (`samebits.config.ENGINE_KWARGS`: device, dtype, kernel_plan, max_model_len,
        block_size, num_kv_blocks, enable_prefix_caching, gpu_memory_utilization,
        max_num_seqs, max_num_batched_tokens, num_threads, enforce_eager,
        tensor_parallel_size), applied on top of
        `config` (an `EngineConfig`; default: all defaults, see docs/architecture.md). An
        unknown keyword is a TypeError naming it. `engine`: use an already built engine (no
        other option may be given then). The resolved config is `llm.engine.config`."""
        if engine is not None:
            if model is not None or config is not None or kwargs:
                raise TypeError("LLM(engine=...) takes no model, config or engine options")
            self.engine = engine
        else:
            self.engine = LLMEngine.from_args(model, progress=progress, config=config, **kwargs)
        self._ids = itertools.count()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def fingerprint(self) -> str:
        return self.engine.fingerprint

    def close(self) -> None:
        """Stop a tensor-parallel deployment's other ranks (`tensor_parallel_size` > 1; also
        done at garbage collection and at exit); a no-op otherwise."""
        close = getattr(self.engine.deployment, "close", None)
        if close is not None:
            close()

    def reset_prefix_cache(self) -> bool:
        """Forget the engine's prefix cache while nothing runs (see
        `LLMEngine.reset_prefix_cache`); returns whether it was dropped."""
        return self.engine.reset_prefix_cache()

    def generate(
        self, prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:  # fmt: skip
        """Run every prompt to completion; outputs in input order (n>1 merged per prompt).

        Raises `RequestFailedError` if a request fails inside the engine (the call's other
        requests are aborted first), ValueError / TypeError on bad input (nothing queued).
        The engine requests are FINAL_ONLY: one cumulative output each, no per-step copies.
        """
        kind = RequestOutputKind.FINAL_ONLY
        groups = self._submit(_as_prompt_list(prompts), sampling_params, kind)
        final: dict[str, RequestOutput] = {}
        for out in self._drive(groups, kind):
            if out.finished:
                final[out.request_id] = out
        return [final[rid] for rid in groups]

    def generate_stream(
        self, prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
        output_kind: RequestOutputKind = RequestOutputKind.CUMULATIVE,
    ) -> Iterator[RequestOutput]:  # fmt: skip
        """Yield a RequestOutput per prompt every step it advances.

        `output_kind` CUMULATIVE (the default): each output carries everything so far (each
        step copies it all: O(tokens so far)). DELTA: only what is new, O(new tokens) per step;
        with n > 1 an output holds the choices that advanced in that step (`index` tells
        which); `finished` is set on a prompt's last output; `prompt_logprobs` comes once.
        Concatenating a choice's deltas gives its cumulative output, bit for bit.

        Raises `RequestFailedError` from the step in which a request failed (that step yields
        nothing). Closing the iterator early, or any error, aborts the call's requests.
        """
        if output_kind not in (RequestOutputKind.CUMULATIVE, RequestOutputKind.DELTA):
            raise ValueError(f"generate_stream takes CUMULATIVE or DELTA, got {output_kind!r}")
        groups = self._submit(_as_prompt_list(prompts), sampling_params, output_kind)
        yield from self._drive(groups, output_kind)

    def chat(
        self, messages: list[dict] | list[list[dict]],
        sampling_params: SamplingParams | None = None,
    ) -> list[RequestOutput]:  # fmt: skip
        """Apply the model's chat template (one conversation or a list of them), then generate."""
        conversations = [messages] if messages and isinstance(messages[0], dict) else messages
        prompts = [
            self.tokenizer.apply_chat_template(c, add_generation_prompt=True) for c in conversations
        ]
        ids = [self.tokenizer.encode(p, add_special_tokens=False) for p in prompts]
        outs = self.generate(ids, sampling_params)
        for out, text in zip(outs, prompts, strict=True):
            out.prompt = text
        return outs

    def _submit(
        self, prompts: list[Prompt], params, kind: RequestOutputKind
    ) -> dict[str, list[str]]:
        """Queue every prompt (n>1 expanded); on any error, abort what was queued and raise."""
        params_list = _params_list(params, len(prompts))
        groups: dict[str, list[str]] = {}
        try:
            for prompt, p in zip(prompts, params_list, strict=True):
                rid = str(next(self._ids))
                text = prompt if isinstance(prompt, str) else None
                ids = (
                    self.tokenizer.encode(prompt, add_special_tokens=True)
                    if text is not None
                    else list(prompt)
                )
                seeded = p if p.seed is not None else p.with_seed(new_seed())
                groups[rid] = []
                for i, single in enumerate(seeded.expand_n()):
                    child = f"{rid}-{i}"
                    self.engine.add_request(child, ids, single, prompt=text, output_kind=kind)
                    groups[rid].append(child)
        except BaseException:
            self._abort(groups)
            raise
        return groups

    def _drive(
        self, groups: dict[str, list[str]], kind: RequestOutputKind
    ) -> Iterator[RequestOutput]:
        """Step the engine until every request of `groups` finished; yield the merged output
        of each prompt that advanced (DELTA: of its choices that advanced in that step).
        Whatever way this ends, no request of `groups` is left in the engine."""
        owner = {child: (index, rid) for index, (rid, kids) in enumerate(groups.items())
                 for child in kids}  # fmt: skip
        pending = set(owner)
        latest: dict[str, RequestOutput] = {}
        delta = kind is RequestOutputKind.DELTA
        prompt_sent: set[str] = set()
        try:
            while pending and self.engine.has_unfinished_requests():
                outputs = self.engine.step()
                failures = {
                    rid: exc for rid, exc in self.engine.pop_failures().items() if rid in owner
                }
                if failures:
                    raise _failed(failures, owner)
                advanced: dict[str, dict[str, RequestOutput]] = {}
                for out in outputs:
                    if out.request_id not in owner:
                        continue
                    latest[out.request_id] = out
                    if out.finished:
                        pending.discard(out.request_id)
                    advanced.setdefault(owner[out.request_id][1], {})[out.request_id] = out
                for parent, now in advanced.items():
                    kids = groups[parent]
                    if not delta:
                        yield _merge(parent, [latest.get(c) for c in kids])
                        continue
                    merged = _merge(parent, [now.get(c) for c in kids])
                    merged.finished = not any(c in pending for c in kids)
                    if parent in prompt_sent:
                        merged.prompt_logprobs = None
                    prompt_sent.add(parent)
                    yield merged
            if pending:
                raise RuntimeError(
                    f"requests {sorted(pending)} left the engine without finishing "
                    "(aborted outside this call?)"
                )
        finally:
            self._abort(groups)

    def _abort(self, groups: dict[str, list[str]]) -> None:
        for kids in groups.values():
            for child in kids:
                self.engine.abort_request(child)


class RequestFailedError(RuntimeError):
    """A request failed inside the engine (its sampling, detokenization or output raised).

    `index` is the failed prompt's position in the call, `request_id` the engine request
    that failed (`"<prompt id>-<choice>"`), `__cause__` the original exception; `failures`
    maps every request of the call that failed in that step to its exception. The call's
    other requests were aborted, so the `LLM` stays usable.
    """

    def __init__(self, index: int, request_id: str, failures: dict[str, Exception]) -> None:
        self.index = index
        self.request_id = request_id
        self.failures = failures
        error = failures[request_id]
        more = f" ({len(failures) - 1} more failed in the same step)" if len(failures) > 1 else ""
        super().__init__(
            f"prompt {index} (request {request_id}) failed in the engine: "
            f"{type(error).__name__}: {error}{more}"
        )


def _failed(failures: dict[str, Exception], owner: dict[str, tuple[int, str]]):
    request_id = min(failures, key=lambda rid: (owner[rid][0], rid))
    err = RequestFailedError(owner[request_id][0], request_id, failures)
    err.__cause__ = failures[request_id]
    return err


def _as_prompt_list(prompts) -> list[Prompt]:
    if isinstance(prompts, str):
        return [prompts]
    prompts = list(prompts)
    if prompts and all(isinstance(t, int) for t in prompts):
        return [prompts]
    return prompts


def _params_list(params, count: int) -> list[SamplingParams]:
    if params is None:
        return [SamplingParams()] * count
    if isinstance(params, SamplingParams):
        return [params] * count
    params = list(params)
    if len(params) != count:
        raise ValueError(f"got {len(params)} SamplingParams for {count} prompts")
    return params


def _merge(parent: str, outs: list[RequestOutput | None]) -> RequestOutput:
    first = next(o for o in outs if o is not None)
    completions = []
    for i, o in enumerate(outs):
        if o is not None:
            c = o.outputs[0]
            c.index = i
            completions.append(c)
    return RequestOutput(
        request_id=parent,
        prompt=first.prompt,
        prompt_token_ids=first.prompt_token_ids,
        outputs=completions,
        finished=all(o is not None and o.finished for o in outs),
        fingerprint=first.fingerprint,
        prompt_logprobs=first.prompt_logprobs,
    )
