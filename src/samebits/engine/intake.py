"""Request intake: what `LLMEngine.add_request` accepts as a prompt, the checks a request
passes before it is queued, and the `Request` it becomes. Torch-free.

Invariant: a request that passes `validate_request` fits the context (prompt + max_tokens <=
max_model_len), has only in-vocabulary prompt ids and logit-bias ids, and a fresh id; nothing
is queued or changed for one that does not (TypeError / ValueError naming the problem).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from samebits.engine.request import Request
from samebits.sampling import SamplingParams

# What add_request takes as a prompt: token ids, text, or a vLLM-style dict of either.
PromptInput = str | list[int] | tuple[int, ...] | dict[str, object]

_DICT_KEYS = {"prompt", "prompt_token_ids"}


def prompt_ids(tokenizer: Any, given: object, prompt: str | None) -> tuple[list[int], str | None]:
    """(token ids, recorded text) of an add_request prompt; TypeError for unknown types.
    A string is tokenized with `add_special_tokens=True` (as `LLM.generate` does)."""
    if isinstance(given, dict):
        given, prompt = _from_dict(given, prompt)
    if isinstance(given, str):
        ids = tokenizer.encode(given, add_special_tokens=True)
        return ids, prompt if prompt is not None else given
    if not isinstance(given, list | tuple):
        raise TypeError(
            "prompt must be a str, a list of token ids, {'prompt_token_ids': [...]} or "
            f"{{'prompt': '...'}}, got {type(given).__name__}"
        )
    for t in given:
        if not isinstance(t, int) or isinstance(t, bool):
            raise TypeError(f"prompt token ids must be ints, got {type(t).__name__} {t!r}")
    return list(given), prompt


def _from_dict(given: dict, prompt: str | None) -> tuple[object, str | None]:
    """A dict prompt's ids (or text, when it has no ids) and the text it records."""
    unknown = sorted(map(str, set(given) - _DICT_KEYS))
    if unknown or not given:
        raise TypeError(
            "a dict prompt takes the keys 'prompt_token_ids' and/or 'prompt', got "
            f"{unknown or 'none'}"
        )
    text = given.get("prompt")
    if text is not None and not isinstance(text, str):
        raise TypeError(f"dict prompt: 'prompt' must be a str, got {type(text).__name__}")
    prompt = prompt if prompt is not None else text
    if "prompt_token_ids" not in given:
        return text, prompt
    ids = given["prompt_token_ids"]
    if not isinstance(ids, list | tuple):
        raise TypeError(
            f"dict prompt: 'prompt_token_ids' must be a list of ints, got {type(ids).__name__}"
        )
    return ids, prompt


def validate_request(
    request_id: str, ids: Sequence[int], params: object, in_use: bool, vocab_size: int,
    max_model_len: int,
) -> None:  # fmt: skip
    """ValueError unless the request may be queued (see the module invariant)."""
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
    if params.n != 1:
        raise ValueError(
            "LLMEngine.add_request takes n=1; expand n>1 with SamplingParams.expand_n()"
        )
    if in_use:
        raise ValueError(f"request_id {request_id!r} is already in use")
    if not ids:
        raise ValueError("the prompt is empty: it must have at least one token")
    bad = [t for t in ids if not 0 <= t < vocab_size]
    if bad:
        raise ValueError(f"prompt token id {bad[0]!r} is out of range [0, {vocab_size})")
    if len(ids) + params.max_tokens > max_model_len:
        raise ValueError(
            f"prompt ({len(ids)} tokens) + max_tokens ({params.max_tokens}) exceeds the "
            f"context length of {max_model_len} tokens"
        )
    bad = [t for t, _ in params.logit_bias if t >= vocab_size]
    if bad:
        raise ValueError(f"logit_bias token id {bad[0]} is out of range [0, {vocab_size})")


def new_request(
    request_id: str, ids: Sequence[int], params: SamplingParams, eos_token_ids: Sequence[int],
    max_model_len: int,
) -> Request:  # fmt: skip
    """The scheduler's `Request` for a validated request whose `params.seed` is set."""
    if params.seed is None:
        raise ValueError("new_request needs params with a seed (add_request assigns one)")
    return Request(
        request_id=request_id,
        prompt_token_ids=list(ids),
        max_tokens=params.max_tokens,
        eos_token_ids=tuple(eos_token_ids),
        stop_token_ids=tuple(params.stop_token_ids),
        ignore_eos=params.ignore_eos,
        max_model_len=max_model_len,
        params=params,
        seed=params.seed,
        min_tokens=params.min_tokens,
        needs_prompt_rows=params.prompt_logprobs is not None,
    )
