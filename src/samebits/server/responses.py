"""JSON bodies of completion and chat completion responses and stream chunks.

Extension field `samebits` (documented in docs/server.md):
- on each choice (and each streamed choice delta): `seed` (the seed this choice was sampled
  with), `token_ids` and `logits_digests` (hex SHA-256 of each position's float32 logits
  row; in a stream, those of the new tokens only); on the final choice object or chunk also
  `prompt_token_ids` and `audit` (`{"seq", "entry_hash"}` of its audit entry, or null);
- on the response object: `fingerprint` (= `system_fingerprint`) and `seed` (the request's
  seed; choice i used `derive_seed(seed, i)`).
"""

from __future__ import annotations

import math
from typing import Any

from samebits.server.generation import Choice

LOGPROB_FLOOR = -9999.0  # JSON has no -Infinity


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def extension(
    choice: Choice, token_ids: list[int], digests: list[str], audit: dict | None, final: bool
) -> dict[str, Any]:
    """The `samebits` field of a choice: all its tokens, or a stream chunk's new ones."""
    ext: dict[str, Any] = {
        "seed": choice.seed,
        "token_ids": list(token_ids),
        "logits_digests": list(digests),
    }
    if final:
        ext["prompt_token_ids"] = list(choice.prompt.token_ids)
        ext["audit"] = audit
    return ext


def top_entries(lp: dict[int, float], k: int) -> list[tuple[int, float]]:
    """The k most likely ids of one position, most likely first (ties: lower id)."""
    return sorted(lp.items(), key=lambda item: (-item[1], item[0]))[:k]


def clean_logprob(value: float) -> float:
    return value if math.isfinite(value) else LOGPROB_FLOOR


def completion_logprobs(
    token_ids: list[int], logprobs: list[dict[int, float] | None], k: int, tokenizer: Any,
    offset: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """OpenAI completions `logprobs` object for the given positions, text offsets counted from
    `offset`. A position without logprobs (the first prompt token when echoing: nothing
    precedes it) has `token_logprobs` and `top_logprobs` None."""
    tokens, token_lps, tops, offsets = [], [], [], []
    for token_id, lp in zip(token_ids, logprobs, strict=True):
        text = tokenizer.token_to_str(token_id)
        tokens.append(text)
        token_lps.append(None if lp is None else clean_logprob(lp[token_id]))
        tops.append(
            None if lp is None
            else {tokenizer.token_to_str(t): clean_logprob(v) for t, v in top_entries(lp, k)}
        )  # fmt: skip
        offsets.append(offset)
        offset += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": token_lps,
        "top_logprobs": tops,
        "text_offset": offsets,
    }


def echo_text(prompt: Any, tokenizer: Any) -> str:
    """The prompt as an echoing completion shows it: the text sent, or the decoded ids."""
    if prompt.text is not None:
        return prompt.text
    return tokenizer.decode(list(prompt.token_ids), skip_special_tokens=False)


def join_logprobs(first: dict[str, Any] | None, second: dict[str, Any]) -> dict[str, Any]:
    """Two completions `logprobs` objects one after the other (prompt, then generated)."""
    if first is None:
        return second
    return {key: list(first[key]) + list(second[key]) for key in second}


def chat_logprobs(
    token_ids: list[int], logprobs: list[dict[int, float]], k: int, tokenizer: Any
) -> dict[str, Any]:
    """OpenAI chat `logprobs` object: `{"content": [...]}`."""
    content = []
    for token_id, lp in zip(token_ids, logprobs, strict=True):
        entry = _chat_token(token_id, lp[token_id], tokenizer)
        entry["top_logprobs"] = [_chat_token(t, v, tokenizer) for t, v in top_entries(lp, k)]
        content.append(entry)
    return {"content": content}


def _chat_token(token_id: int, logprob: float, tokenizer: Any) -> dict[str, Any]:
    text = tokenizer.token_to_str(token_id)
    return {"token": text, "logprob": clean_logprob(logprob), "bytes": list(text.encode("utf-8"))}
