"""A mixed workload sent with the official `openai` client, concurrently or one by one.

Each request's result is reduced to what must be bit-identical however the server batched
it: token ids, logits digests, logprobs (as floats parsed from JSON, compared exactly), text
and finish reason.
"""

from __future__ import annotations

import asyncio
from typing import Any

import openai


def make_requests(count: int, max_tokens: int = 8) -> list[dict[str, Any]]:
    """`count` requests: completions and chat, streamed or not, various samplers."""
    requests = []
    for i in range(count):
        chat = i % 2 == 1
        body: dict[str, Any] = {
            "max_tokens": max_tokens - (i % 3),
            "seed": 1000 + i,
            "temperature": (0.0, 0.7, 1.0, 1.3)[i % 4],
            "top_p": (1.0, 0.9)[i % 2],
            "stream": i % 4 >= 2,
            "extra_body": {"top_k": (0, 40)[i % 2], "ignore_eos": i % 5 != 0},
        }
        text = f"Request {i}: tell me about item {i * 7 % 13}."
        if chat:
            body["messages"] = [{"role": "user", "content": text}]
            body["logprobs"], body["top_logprobs"] = True, 2
        else:
            body["prompt"] = text
            body["logprobs"] = 2
        requests.append({"chat": chat, "body": body})
    return requests


def _ext(obj: Any) -> dict[str, Any]:
    return (obj.model_extra or {})["samebits"]


async def run_one(client: openai.AsyncOpenAI, model: str, request: dict[str, Any]) -> dict:
    body = dict(request["body"], model=model)
    if request["chat"]:
        response = await client.chat.completions.create(**body)
    else:
        response = await client.completions.create(**body)
    if body["stream"]:
        return await _collect_stream(response, request["chat"])
    choice = response.choices[0]
    ext = _ext(choice)
    if request["chat"]:
        logprobs = [
            (t.token, t.logprob, [(x.token, x.logprob) for x in t.top_logprobs])
            for t in choice.logprobs.content
        ]
        text = choice.message.content
    else:
        logprobs = list(zip(choice.logprobs.tokens, choice.logprobs.token_logprobs, strict=True))
        text = choice.text
    return {
        "token_ids": ext["token_ids"],
        "digests": ext["logits_digests"],
        "logprobs": logprobs,
        "text": text,
        "finish_reason": choice.finish_reason,
        "seed": ext["seed"],
        "fingerprint": response.system_fingerprint,
    }


async def _collect_stream(stream: Any, chat: bool) -> dict:
    out = {"token_ids": [], "digests": [], "logprobs": [], "text": "", "finish_reason": None}
    async for chunk in stream:
        if not chunk.choices:
            continue
        choice = chunk.choices[0]
        extra = choice.model_extra or {}
        if "samebits" not in extra:  # the chat role chunk
            continue
        ext = extra["samebits"]
        out["token_ids"] += ext["token_ids"]
        out["digests"] += ext["logits_digests"]
        out["seed"] = ext["seed"]
        out["fingerprint"] = chunk.system_fingerprint
        if chat:
            out["text"] += choice.delta.content or ""
            if choice.logprobs is not None:
                out["logprobs"] += [
                    (t.token, t.logprob, [(x.token, x.logprob) for x in t.top_logprobs])
                    for t in choice.logprobs.content
                ]
        else:
            out["text"] += choice.text
            if choice.logprobs is not None:
                out["logprobs"] += list(
                    zip(choice.logprobs.tokens, choice.logprobs.token_logprobs, strict=True)
                )
        out["finish_reason"] = choice.finish_reason or out["finish_reason"]
    return out


def run_workload(base_url: str, model: str, requests: list[dict], concurrent: bool) -> list[dict]:
    async def main() -> list[dict]:
        client = openai.AsyncOpenAI(
            base_url=base_url + "/v1", api_key="unused", max_retries=0, timeout=300
        )
        async with client:
            if concurrent:
                return list(await asyncio.gather(*(run_one(client, model, r) for r in requests)))
            return [await run_one(client, model, r) for r in requests]

    return asyncio.run(main())
