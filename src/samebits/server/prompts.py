"""Prompts of API requests as token ids, checked against the deployment's limits.

A completion `prompt` may be a string, a list of strings, a list of token ids or a list of
token id lists; strings are encoded with the tokenizer's special tokens (e.g. BOS) added
(`add_special_tokens`, default true). A chat request renders its messages with the model's
chat template (`add_generation_prompt`, default true) and encodes the result as is
(`add_special_tokens` default false: the template writes any special tokens itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from samebits.server.errors import bad_request
from samebits.server.params import check_limit, check_token_ids
from samebits.server.protocol import ChatCompletionRequest, CompletionRequest


@dataclass(frozen=True)
class Prompt:
    """One prompt: its token ids and its text (None when given as ids)."""

    token_ids: tuple[int, ...]
    text: str | None


def completion_prompts(req: CompletionRequest, tokenizer: Any, max_prompts: int) -> list[Prompt]:
    """The prompts of a completion request (several for a batched `prompt`)."""
    raw = req.prompt
    if isinstance(raw, str) or (isinstance(raw, list) and raw and isinstance(raw[0], int)):
        items: list[Any] = [raw]
    else:
        items = list(raw)
    if not items:
        raise bad_request("'prompt' is empty", "prompt")
    check_limit("prompt", len(items), max_prompts, "the number of prompts in 'prompt'")
    return [_one_prompt(item, tokenizer, req.add_special_tokens) for item in items]


def _one_prompt(item: str | list[int], tokenizer: Any, add_special_tokens: bool) -> Prompt:
    if isinstance(item, str):
        if not item:
            raise bad_request("'prompt' is an empty string", "prompt")
        return Prompt(tuple(tokenizer.encode(item, add_special_tokens=add_special_tokens)), item)
    return Prompt(tuple(item), None)


def chat_prompt(req: ChatCompletionRequest, tokenizer: Any) -> Prompt:
    """The chat template applied to the request's messages."""
    messages = [{"role": m.role, "content": m.text()} for m in req.messages]
    try:
        text = tokenizer.apply_chat_template(
            messages, add_generation_prompt=req.add_generation_prompt
        )
    except ValueError as exc:
        raise bad_request(f"cannot apply the chat template: {exc}", "messages") from exc
    ids = tokenizer.encode(text, add_special_tokens=req.add_special_tokens)
    return Prompt(tuple(ids), text)


def check_prompt(prompt: Prompt, vocab_size: int, max_model_len: int) -> None:
    """Empty prompt, out-of-range token ids and prompts that leave no room to generate."""
    if not prompt.token_ids:
        raise bad_request("the prompt is empty (0 tokens)", "prompt")
    check_token_ids("prompt", prompt.token_ids, vocab_size, "prompt token id")
    if len(prompt.token_ids) >= max_model_len:
        raise bad_request(
            f"the prompt has {len(prompt.token_ids)} tokens; the context length is "
            f"{max_model_len}, which leaves no room for output",
            "prompt",
        )
