"""What differs between /v1/completions and /v1/chat/completions: prompts and JSON shapes.

Chat with a tool parser: the message carries `tool_calls` (the parse of the whole output) and
`content` (the text outside the calls, or null); a streamed choice sends content, each call's
first delta and its argument fragments as `ToolCallStream` settles them (an engine delta may
become two chunks: a call's first delta, then the arguments it already has), so the client
assembles the same message. A choice that stopped ("stop") with at least one call finishes
with "tool_calls".
"""

from __future__ import annotations

from typing import Any

from samebits.server.config import ServerConfig
from samebits.server.engine_loop import Delta
from samebits.server.generation import Choice
from samebits.server.prompts import Prompt, chat_prompt, completion_prompts
from samebits.server.protocol import ChatCompletionRequest, CompletionRequest
from samebits.server.responses import (
    chat_logprobs,
    completion_logprobs,
    echo_text,
    extension,
    join_logprobs,
)
from samebits.server.tools import ToolPlan, call_id, tool_plan
from samebits.tools.calls import ToolCall
from samebits.tools.stream import CallDelta, StreamPiece


class CompletionFlavor:
    endpoint = "/v1/completions"
    request_model = CompletionRequest
    object_name = "text_completion"
    chunk_object_name = "text_completion"
    id_prefix = "cmpl"

    def tool_plan(self, req: Any, tokenizer: Any, parser_name: str | None) -> ToolPlan | None:
        return None

    def prompts(
        self, req: Any, tokenizer: Any, config: ServerConfig, tools: ToolPlan | None
    ) -> list[Prompt]:
        return completion_prompts(req, tokenizer, config.max_prompts)

    def choice_body(self, choice: Choice, k: int | None, tokenizer: Any, audit: Any) -> dict:
        prefix, prompt_lps = self._echo(choice, k, tokenizer)
        logprobs = None
        if k is not None and choice.shown_logprobs is not None:
            generated = completion_logprobs(
                choice.shown_token_ids, choice.shown_logprobs, k, tokenizer, len(prefix)
            )
            logprobs = join_logprobs(prompt_lps, generated)
        return {
            "index": choice.index,
            "text": prefix + choice.shown_text,
            "logprobs": logprobs,
            "finish_reason": choice.shown_finish_reason,
            "samebits": extension(
                choice, choice.shown_token_ids, choice.shown_digests, audit, True
            ),
        }

    @staticmethod
    def _echo(choice: Choice, k: int | None, tokenizer: Any) -> tuple[str, dict | None]:
        """(prompt text, prompt logprobs object or None) an echoing choice starts with."""
        if not choice.echo:
            return "", None
        lps = None
        if k is not None and choice.prompt_logprobs is not None:
            lps = completion_logprobs(
                list(choice.prompt.token_ids), choice.prompt_logprobs, k, tokenizer
            )
        return echo_text(choice.prompt, tokenizer), lps

    def opening_chunks(self, choices: list[Choice]) -> list[dict]:
        return []

    def chunk_choices(
        self, choice: Choice, added: str, delta: Delta, k: int | None, tokenizer: Any, audit: Any
    ) -> list[dict]:
        """The chunk choices of one engine delta (one)."""
        return [self.chunk_choice(choice, added, delta, k, tokenizer, audit)]

    def chunk_choice(
        self, choice: Choice, added: str, delta: Delta, k: int | None, tokenizer: Any, audit: Any
    ) -> dict:
        prefix, prompt_lps = "", None
        if choice.echo and not choice.echo_sent:
            prefix, prompt_lps = self._echo(choice, k, tokenizer)
            choice.echo_sent = True
        tokens, digests = list(delta.token_ids), list(delta.logits_digests)
        lps = list(delta.logprobs) if delta.logprobs is not None else None
        if choice.scoring_only:
            added, tokens, digests, lps = "", [], [], [] if lps is not None else None
        logprobs = None
        if k is not None and lps is not None:
            offset = len(choice.text) - len(added)
            if choice.echo:
                offset += len(echo_text(choice.prompt, tokenizer))
            logprobs = join_logprobs(
                prompt_lps, completion_logprobs(tokens, lps, k, tokenizer, offset)
            )
        final = delta.finish_reason is not None
        return {
            "index": choice.index,
            "text": prefix + added,
            "logprobs": logprobs,
            "finish_reason": choice.shown_finish_reason if final else None,
            "samebits": extension(choice, tokens, digests, audit, final),
        }


class ChatFlavor:
    endpoint = "/v1/chat/completions"
    request_model = ChatCompletionRequest
    object_name = "chat.completion"
    chunk_object_name = "chat.completion.chunk"
    id_prefix = "chatcmpl"

    def tool_plan(self, req: Any, tokenizer: Any, parser_name: str | None) -> ToolPlan | None:
        return tool_plan(req, tokenizer, parser_name)

    def prompts(
        self, req: Any, tokenizer: Any, config: ServerConfig, tools: ToolPlan | None
    ) -> list[Prompt]:
        return [chat_prompt(req, tokenizer, tools)]

    def choice_body(self, choice: Choice, k: int | None, tokenizer: Any, audit: Any) -> dict:
        logprobs = None
        if k is not None and choice.logprobs is not None:
            logprobs = chat_logprobs(choice.token_ids, choice.logprobs, k, tokenizer)
        message: dict[str, Any] = {"role": "assistant", "content": choice.text}
        finish_reason = choice.finish_reason
        if choice.tools is not None and choice.tools.parser is not None:
            parsed = choice.tools.parse(parser_text(choice, tokenizer))
            message["content"] = parsed.content
            if parsed.calls:
                message["tool_calls"] = [
                    c.to_openai(call_id(choice.request_id, i)) for i, c in enumerate(parsed.calls)
                ]
            finish_reason = _tool_finish(finish_reason, bool(parsed.calls))
        return {
            "index": choice.index,
            "message": message,
            "logprobs": logprobs,
            "finish_reason": finish_reason,
            "samebits": extension(choice, choice.token_ids, choice.logits_digests, audit, True),
        }

    def opening_chunks(self, choices: list[Choice]) -> list[dict]:
        return [
            {
                "index": c.index,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
            for c in choices
        ]

    def chunk_choices(
        self, choice: Choice, added: str, delta: Delta, k: int | None, tokenizer: Any, audit: Any
    ) -> list[dict]:
        """The chunk choices of one engine delta: one, or with tools one per stream piece
        (the first carries the delta's tokens and logprobs, the last its finish)."""
        logprobs = None
        if k is not None and delta.logprobs is not None:
            logprobs = chat_logprobs(list(delta.token_ids), list(delta.logprobs), k, tokenizer)
        final = delta.finish_reason is not None
        bodies, finish_reason = _delta_bodies(choice, added, delta, tokenizer)
        tokens, digests = list(delta.token_ids), list(delta.logits_digests)
        out = []
        for i, body in enumerate(bodies):
            first, last = i == 0, i == len(bodies) - 1
            out.append({
                "index": choice.index,
                "delta": body,
                "logprobs": logprobs if first else None,
                "finish_reason": finish_reason if last else None,
                "samebits": extension(choice, tokens if first else [],
                                      digests if first else [], audit, final and last),
            })  # fmt: skip
        return out


def _delta_bodies(
    choice: Choice, added: str, delta: Delta, tokenizer: Any
) -> tuple[list[dict[str, Any]], str | None]:
    """(the `delta` bodies of one engine delta, its finish reason): the added text, or the
    tool stream's pieces."""
    final = delta.finish_reason is not None
    if choice.tool_stream is None:
        return [{"content": added} if added or not final else {}], delta.finish_reason
    stream, text = choice.tool_stream, parser_text(choice, tokenizer)
    pieces = stream.finish(text) if final else stream.update(text)
    finish_reason = _tool_finish(delta.finish_reason, bool(stream.calls_sent))
    return [_tool_delta(choice, piece) for piece in pieces], finish_reason


def parser_text(choice: Choice, tokenizer: Any) -> str:
    """The text a tool parser reads: the output less the text of a final EOS token, which
    the decoder keeps when special tokens are kept (the Mistral parser needs them kept)."""
    ids, text = choice.token_ids, choice.text
    if choice.params.skip_special_tokens or not ids or ids[-1] not in tokenizer.eos_token_ids:
        return text
    eos_text = tokenizer.token_to_str(ids[-1])
    return text[: -len(eos_text)] if eos_text and text.endswith(eos_text) else text


def _tool_finish(finish_reason: str | None, has_calls: bool) -> str | None:
    return "tool_calls" if has_calls and finish_reason == "stop" else finish_reason


def _tool_delta(choice: Choice, piece: StreamPiece) -> dict[str, Any]:
    """A chunk's delta: new content; per call, its first delta (index, id, type, name,
    arguments "") or an arguments fragment (index, arguments), as OpenAI streams calls."""
    body: dict[str, Any] = {}
    if piece.content:
        body["content"] = piece.content
    if piece.calls:
        body["tool_calls"] = [_call_delta(choice, d) for d in piece.calls]
    return body


def _call_delta(choice: Choice, delta: CallDelta) -> dict[str, Any]:
    if delta.name is None:
        return {"index": delta.index, "function": {"arguments": delta.arguments}}
    call = ToolCall(delta.name, delta.arguments)
    return {"index": delta.index, **call.to_openai(call_id(choice.request_id, delta.index))}


Flavor = CompletionFlavor | ChatFlavor
