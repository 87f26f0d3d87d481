"""Serving one completion or chat completion call: validate, generate, record, respond.

Per call: parse and validate the body, turn prompts into token ids, expand `n` (and batched
prompts) into choices with their seeds, submit them to the engine loop, then either stream
SSE chunks or wait for the end. A watcher task aborts the call's engine requests as soon as
the client disconnects. Each choice's audit entry is written (and durable) before its final
chunk or the response goes out.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from fastapi.responses import JSONResponse, StreamingResponse
from starlette.requests import Request

from samebits.server.audit_hook import AuditRecorder, CallInfo
from samebits.server.config import ServerConfig
from samebits.server.engine_loop import EngineLoop
from samebits.server.errors import APIError
from samebits.server.flavors import Flavor
from samebits.server.generation import Choice, ClientGone, Generation
from samebits.server.metrics import ServerMetrics
from samebits.server.params import (
    base_params,
    check_n,
    echoes,
    num_logprobs,
    request_seed,
    resolve_max_tokens,
    scoring_only,
)
from samebits.server.parsing import parse_json_body, read_body, validate_model
from samebits.server.prompts import Prompt, check_prompt
from samebits.server.responses import usage
from samebits.server.tools import ToolPlan, served_parser_name
from samebits.tools.stream import ToolCallStream

SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


@dataclass(frozen=True)
class CallMeta:
    """Identity of one API call as reported in its response."""

    id: str
    created: int
    model: str
    seed: int
    num_logprobs: int | None
    fingerprint: str
    include_usage: bool


class OpenAIService:
    """The completion endpoints over one engine loop."""

    def __init__(
        self, engine_loop: EngineLoop, config: ServerConfig, recorder: AuditRecorder,
        metrics: ServerMetrics,
    ) -> None:  # fmt: skip
        engine = engine_loop.engine
        self.engine_loop = engine_loop
        self.config = config
        self.recorder = recorder
        self.metrics = metrics
        self.tokenizer = engine.tokenizer
        self.vocab_size = int(engine.vocab_size)
        self.max_model_len = int(engine.max_model_len)
        self.fingerprint = str(engine.fingerprint)
        self.tool_parser = served_parser_name(config.tool_call_parser, engine)

    async def handle(self, request: Request, flavor: Flavor) -> Any:
        """Serve one call of `flavor`'s endpoint."""
        received_at = time.time()
        body = await read_body(request, self.config.max_body_bytes)
        req = validate_model(flavor.request_model, parse_json_body(body))
        self._check_model(req.model)
        check_n(req, self.config)
        tools = flavor.tool_plan(req, self.tokenizer, self.tool_parser)
        prompts = flavor.prompts(req, self.tokenizer, self.config, tools)
        for prompt in prompts:
            check_prompt(prompt, self.vocab_size, self.max_model_len)
        meta = self._meta(req, flavor)
        gen = Generation(self.engine_loop, self._choices(req, prompts, meta, tools))
        await gen.start()
        call = CallInfo(flavor.endpoint, req.user, received_at)
        if req.stream:
            chunks = self._stream(request, gen, flavor, meta, call)
            return _SettlingStream(chunks, lambda: self._settle(gen, call))
        return JSONResponse(await self._complete(request, gen, flavor, meta, call))

    def _check_model(self, model: str | None) -> None:
        if model is not None and model not in self.config.model_names:
            raise APIError(
                404,
                f"model {model!r} does not exist; this server serves {list(self.config.model_names)}",
                "model",
                "model_not_found",
            )

    def _meta(self, req: Any, flavor: Flavor) -> CallMeta:
        options = req.stream_options
        return CallMeta(
            id=f"{flavor.id_prefix}-{uuid.uuid4().hex}",
            created=int(time.time()),
            model=req.model or self.config.model_name,
            seed=request_seed(req),
            num_logprobs=num_logprobs(req),
            fingerprint=self.fingerprint,
            include_usage=bool(options and options.include_usage),
        )

    def _choices(
        self, req: Any, prompts: list[Prompt], meta: CallMeta, tools: ToolPlan | None
    ) -> list[Choice]:
        choices = []
        for p, prompt in enumerate(prompts):
            max_tokens = resolve_max_tokens(
                req, len(prompt.token_ids), self.max_model_len, self.config
            )
            base = base_params(req, max_tokens, meta.seed, self.vocab_size, tools)
            for i, params in enumerate(base.expand_n()):
                index = p * req.n + i
                choices.append(
                    Choice(
                        index, f"{meta.id}-{index}", prompt, params, echo=echoes(req),
                        scoring_only=scoring_only(req), tools=tools,
                        tool_stream=_tool_stream(tools) if req.stream else None,
                    )
                )  # fmt: skip
        return choices

    async def _complete(
        self, request: Request, gen: Generation, flavor: Flavor, meta: CallMeta, call: CallInfo
    ) -> dict[str, Any]:
        watcher = _watch_disconnect(request, gen.client_gone)
        try:
            async for _ in gen.events():
                pass
            audits = await asyncio.gather(*(self.recorder.record(c, call) for c in gen.choices))
        finally:
            watcher.cancel()
            self._settle(gen, call)
        body = self._envelope(meta, flavor.object_name)
        body["choices"] = [
            flavor.choice_body(c, meta.num_logprobs, self.tokenizer, a)
            for c, a in zip(gen.choices, audits, strict=True)
        ]
        body["usage"] = self._usage(gen)
        return body

    async def _stream(
        self, request: Request, gen: Generation, flavor: Flavor, meta: CallMeta, call: CallInfo
    ) -> AsyncIterator[str]:
        watcher = _watch_disconnect(request, gen.client_gone)
        try:
            for opening in flavor.opening_chunks(gen.choices):
                yield self._chunk(meta, flavor, [opening])
            async for choice, added, delta in gen.events():
                final = delta.finish_reason is not None
                audit = await self.recorder.record(choice, call) if final else None
                pieces = flavor.chunk_choices(
                    choice, added, delta, meta.num_logprobs, self.tokenizer, audit
                )
                for piece in pieces:
                    yield self._chunk(meta, flavor, [piece])
            if meta.include_usage:
                yield self._chunk(meta, flavor, [], usage=self._usage(gen))
            yield "data: [DONE]\n\n"
        except ClientGone:
            return
        except APIError as exc:
            self.metrics.on_stream_error()
            yield _sse(exc.to_dict())
            yield "data: [DONE]\n\n"
        finally:
            watcher.cancel()
            self._settle(gen, call)

    def _settle(self, gen: Generation, call: CallInfo) -> None:
        """Abort what is unfinished, record what was not recorded, count tokens (once).

        Runs when the call ends, however it ends: a choice the client never received (gone,
        failed) is still logged, with finish_reason "abort" if it did not finish.
        """
        if gen.settled:
            return
        gen.settled = True
        if not gen.finished:
            gen.abort()
        for choice in gen.choices:
            if choice.finish_reason == "abort" and choice.accepted:
                self.metrics.on_abort()
            self.recorder.record_nowait(choice, call)
        self.metrics.on_tokens(_prompt_tokens(gen), _completion_tokens(gen))

    def _usage(self, gen: Generation) -> dict[str, int]:
        return usage(_prompt_tokens(gen), _completion_tokens(gen))

    def _envelope(self, meta: CallMeta, object_name: str) -> dict[str, Any]:
        return {
            "id": meta.id,
            "object": object_name,
            "created": meta.created,
            "model": meta.model,
            "system_fingerprint": meta.fingerprint,
            "samebits": {"fingerprint": meta.fingerprint, "seed": meta.seed},
        }

    def _chunk(self, meta: CallMeta, flavor: Flavor, choices: list, usage: Any = None) -> str:
        body = self._envelope(meta, flavor.chunk_object_name)
        body["choices"] = choices
        if usage is not None:
            body["usage"] = usage
        return _sse(body)


def _tool_stream(tools: ToolPlan | None) -> ToolCallStream | None:
    if tools is None or tools.parser is None:
        return None
    return tools.stream()


def _prompt_tokens(gen: Generation) -> int:
    prompts = {id(c.prompt): c.prompt for c in gen.choices}
    return sum(len(p.token_ids) for p in prompts.values())


def _completion_tokens(gen: Generation) -> int:
    return sum(len(c.shown_token_ids) for c in gen.choices)


def _sse(body: dict[str, Any]) -> str:
    text = json.dumps(body, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return f"data: {text}\n\n"


class _SettlingStream(StreamingResponse):
    """An SSE response that settles its generation however the response ends — also when
    the client left before the first byte, so the body generator never started (its own
    `finally` then never runs)."""

    def __init__(self, chunks: AsyncIterator[str], on_close: Callable[[], None]) -> None:
        super().__init__(chunks, media_type="text/event-stream", headers=SSE_HEADERS)
        self._on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()


def _watch_disconnect(request: Request, on_gone: Callable[[], None]) -> asyncio.Task:
    """A task that calls `on_gone` when the client disconnects (cancel it when done)."""

    async def watch() -> None:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                on_gone()
                return

    return asyncio.get_running_loop().create_task(watch())
