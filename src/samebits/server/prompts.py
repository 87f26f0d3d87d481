"""Prompts of API requests as token ids, checked against the deployment's limits.

A completion `prompt` may be a string, a list of strings, a list of token ids or a list of
token id lists; strings are encoded with the tokenizer's special tokens (e.g. BOS) added
(`add_special_tokens`, default true). A chat request renders its messages with the model's
chat template (`add_generation_prompt`, default true) and encodes the result as is
(`add_special_tokens` default false: the template writes any special tokens itself).
Tool calling: the tools go to the template as `tools`, an assistant message's `tool_calls`
as `[{"id", "type": "function", "function": {"name", "arguments"}}]` with the arguments
decoded to an object (what HF templates expect), a tool message with its `tool_call_id`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from samebits.server.chat_render import render_chat
from samebits.server.errors import bad_request
from samebits.server.params import check_limit, check_token_ids
from samebits.server.protocol import ChatCompletionRequest, ChatMessage, CompletionRequest
from samebits.server.tools import ToolPlan


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


def chat_prompt(
    req: ChatCompletionRequest, tokenizer: Any, tools: ToolPlan | None = None
) -> Prompt:
    """The chat template applied to the request's messages (and tools)."""
    messages = [_message(i, m) for i, m in enumerate(req.messages)]
    tool_list = [t.to_openai() for t in tools.tools] if tools is not None else None
    try:
        text = render_chat(tokenizer, messages, req.add_generation_prompt, tool_list)
    except ValueError as exc:
        raise bad_request(f"cannot apply the chat template: {exc}", "messages") from exc
    ids = tokenizer.encode(text, add_special_tokens=req.add_special_tokens)
    return Prompt(tuple(ids), text)


def _message(index: int, message: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"role": message.role, "content": message.text()}
    if message.name is not None:
        out["name"] = message.name
    if message.tool_calls:
        if message.role != "assistant":
            raise bad_request(f"messages[{index}]: only an assistant has tool_calls", "messages")
        out["tool_calls"] = [_call(index, j, c) for j, c in enumerate(message.tool_calls)]
    if message.role == "tool":
        if message.tool_call_id is None:
            raise bad_request(f"messages[{index}]: a tool message needs 'tool_call_id'", "messages")
        out["tool_call_id"] = message.tool_call_id
    return out


def _call(index: int, j: int, call: dict[str, Any]) -> dict[str, Any]:
    where = f"messages[{index}].tool_calls[{j}]"
    function = call.get("function")
    if call.get("type", "function") != "function" or not isinstance(function, dict):
        raise bad_request(
            f"{where} must be {{'type': 'function', 'function': {{...}}}}", "messages"
        )
    name, arguments = function.get("name"), function.get("arguments", "{}")
    if not isinstance(name, str) or not name:
        raise bad_request(f"{where}.function.name must be a non-empty string", "messages")
    decoded = _arguments(where, arguments)
    function_out = {"name": name, "arguments": decoded}
    return {"id": call.get("id"), "type": "function", "function": function_out}


def _arguments(where: str, arguments: Any) -> dict[str, Any]:
    try:
        decoded = json.loads(arguments) if isinstance(arguments, str) else None
    except json.JSONDecodeError:
        decoded = None
    if not isinstance(decoded, dict):
        raise bad_request(
            f"{where}.function.arguments must be JSON text of an object, got {arguments!r:.60}",
            "messages",
        )
    return decoded


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
