"""`LLM`: the offline API (vLLM-style names) on top of `LLMEngine`."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Sequence

from samebits.engine.engine import DEFAULT_NUM_KV_BLOCKS, LLMEngine
from samebits.outputs import RequestOutput
from samebits.sampling import SamplingParams, derive_seed, new_seed

Prompt = str | Sequence[int]


class LLM:
    """Offline generation. Invariant: each output equals what the same prompt and sampler
    state produce alone (a prefix of the spec's Ref), whatever else is in the batch."""

    def __init__(
        self, model: str | None = None, dtype: str | None = None, kernel_plan: str = "invariant",
        max_num_seqs: int = 32, max_num_batched_tokens: int = 512, block_size: int = 16,
        num_kv_blocks: int = DEFAULT_NUM_KV_BLOCKS, enable_prefix_caching: bool = True,
        num_threads: int | None = None, max_model_len: int | None = None, progress: bool = False,
        engine: LLMEngine | None = None, device: str = "cpu",
    ) -> None:  # fmt: skip
        """`device` "cpu" (float32) or "cuda" (bfloat16, Triton invariant kernels); `dtype`
        None takes the device's default."""
        self.engine = engine or LLMEngine.from_args(
            model, progress=progress, kernel_plan=kernel_plan, dtype=dtype, device=device,
            max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
            block_size=block_size, num_kv_blocks=num_kv_blocks,
            enable_prefix_caching=enable_prefix_caching, num_threads=num_threads,
            max_model_len=max_model_len,
        )  # fmt: skip
        self._ids = itertools.count()

    @property
    def tokenizer(self):
        return self.engine.tokenizer

    @property
    def fingerprint(self) -> str:
        return self.engine.fingerprint

    def generate(
        self, prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> list[RequestOutput]:  # fmt: skip
        """Run every prompt to completion; outputs in input order (n>1 merged per prompt)."""
        final: dict[str, RequestOutput] = {}
        for out in self.generate_stream(prompts, sampling_params):
            if out.finished:
                final[out.request_id] = out
        return [final[rid] for rid in self._last_order]

    def generate_stream(
        self, prompts: Prompt | Sequence[Prompt],
        sampling_params: SamplingParams | Sequence[SamplingParams] | None = None,
    ) -> Iterator[RequestOutput]:  # fmt: skip
        """Yield a cumulative RequestOutput per prompt every step it advances."""
        groups = self._submit(_as_prompt_list(prompts), sampling_params)
        self._last_order = list(groups)
        children = {child: rid for rid, kids in groups.items() for child in kids}
        latest: dict[str, RequestOutput] = {}
        while self.engine.has_unfinished_requests():
            advanced = []
            for out in self.engine.step():
                latest[out.request_id] = out
                parent = children.get(out.request_id)
                if parent is not None and parent not in advanced:
                    advanced.append(parent)
            for parent in advanced:
                yield _merge(parent, [latest.get(c) for c in groups[parent]])

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

    def _submit(self, prompts: list[Prompt], params) -> dict[str, list[str]]:
        params_list = _params_list(params, len(prompts))
        groups: dict[str, list[str]] = {}
        for prompt, p in zip(prompts, params_list, strict=True):
            rid = str(next(self._ids))
            text = prompt if isinstance(prompt, str) else None
            ids = (
                self.tokenizer.encode(prompt, add_special_tokens=True)
                if text is not None
                else list(prompt)
            )
            base = p.seed if p.seed is not None else new_seed()
            groups[rid] = []
            for i in range(p.n):
                child = f"{rid}-{i}"
                single = dataclasses.replace(p, n=1, seed=derive_seed(base, i))
                self.engine.add_request(child, ids, single, prompt=text)
                groups[rid].append(child)
        return groups


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
    )
