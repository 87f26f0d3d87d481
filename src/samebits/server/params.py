"""From an API request to the `SamplingParams` of each engine request.

A request with `n` choices (per prompt) becomes `n` engine requests; choice `i` is sampled
with `derive_seed(seed, i)`, so choice 0 equals the same request with n = 1. A request
without `seed` gets a fresh one here, reported back and logged, so every choice replays.

Scoring (completions, `echo`): with `logprobs=k` the engine request asks for
`prompt_logprobs=k`; `max_tokens=0` runs an engine request of one token (as vLLM does) whose
output the response leaves out (`scoring_only`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from samebits.sampling import LOGIT_BIAS_LIMIT, SamplingParams, new_seed
from samebits.server.config import ServerConfig
from samebits.server.errors import bad_request
from samebits.server.protocol import ChatCompletionRequest, CompletionRequest
from samebits.server.structured import structured_outputs
from samebits.server.tools import ToolPlan
from samebits.structured import StructuredOutputsParams

AnyRequest = CompletionRequest | ChatCompletionRequest


def check_limit(
    param: str, value: int, limit: int | None, what: str | None = None, source: str = ""
) -> None:
    """The one check of a request number against a limit: `value` <= `limit` (None: no
    limit), else a 400 naming `param` ("'n' is 9, the limit is 4"); `source` says where the
    limit comes from when it is not the server's."""
    if limit is not None and value > limit:
        origin = f" ({source})" if source else ""
        raise bad_request(f"{what or repr(param)} is {value}, the limit is {limit}{origin}", param)


def check_token_ids(param: str, ids: Iterable[int], vocab_size: int, what: str) -> None:
    """The one check of token ids against the model: each in [0, vocab_size), else a 400
    naming `param` and the first id out of range."""
    bad = next((t for t in ids if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise bad_request(f"{what} {bad} is out of range [0, {vocab_size}) for this model", param)


def check_n(req: AnyRequest, config: ServerConfig) -> None:
    check_limit("n", req.n, config.max_n)


def requested_max_tokens(req: AnyRequest) -> int | None:
    if isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None:
        return req.max_completion_tokens
    return req.max_tokens


def resolve_max_tokens(
    req: AnyRequest, prompt_len: int, max_model_len: int, config: ServerConfig
) -> int:
    """`max_tokens` checked against the context and the server limit; defaulted if absent.

    Default: `default_completion_max_tokens` for completions, the rest of the context for
    chat; both capped by `max_tokens_limit`.
    """
    room = max_model_len - prompt_len
    asked = requested_max_tokens(req)
    limit = config.max_tokens_limit
    if asked is None:
        default = (
            room if isinstance(req, ChatCompletionRequest) else config.default_completion_max_tokens
        )
        return min(default, room, limit or room)
    param = "max_completion_tokens" if _uses_completion_tokens(req) else "max_tokens"
    check_limit(param, asked, limit)
    if asked > room:
        raise bad_request(
            f"the prompt ({prompt_len} tokens) plus '{param}' ({asked}) exceeds the context "
            f"length of {max_model_len} tokens",
            param,
        )
    return asked


def _uses_completion_tokens(req: AnyRequest) -> bool:
    return isinstance(req, ChatCompletionRequest) and req.max_completion_tokens is not None


def num_logprobs(req: AnyRequest) -> int | None:
    """How many top logprobs to return per position (None: no logprobs)."""
    if isinstance(req, ChatCompletionRequest):
        return (req.top_logprobs or 0) if req.logprobs else None
    return req.logprobs


def request_seed(req: AnyRequest) -> int:
    """The request's seed, or a fresh one."""
    return req.seed if req.seed is not None else new_seed()


def echoes(req: AnyRequest) -> bool:
    """Whether the response starts with the prompt (completions `echo`)."""
    return isinstance(req, CompletionRequest) and req.echo


def scoring_only(req: AnyRequest) -> bool:
    """`max_tokens=0` with `echo`: the prompt is scored, nothing generated is returned."""
    return echoes(req) and req.max_tokens == 0


def prompt_logprobs(req: AnyRequest) -> int | None:
    """Top logprobs per prompt position the engine must compute (echo with logprobs)."""
    return req.logprobs if echoes(req) else None


def logit_bias(req: AnyRequest, vocab_size: int) -> dict[int, float]:
    """`logit_bias` as {token id: bias}: keys decimal token ids in [0, vocab_size), values
    numbers in [-100, 100] (OpenAI's range); anything else is a 400 naming `logit_bias`."""
    out: dict[int, float] = {}
    for key, value in (req.logit_bias or {}).items():
        if not (key.isascii() and key.isdigit()):
            raise bad_request(
                f"'logit_bias' keys must be token ids (decimal integers), got {key[:40]!r}",
                "logit_bias",
            )
        token = int(key)
        check_token_ids("logit_bias", [token], vocab_size, "'logit_bias' token id")
        if token in out:
            raise bad_request(f"'logit_bias' has token id {token} twice", "logit_bias")
        out[token] = _bias_value(key, value)
    return out


def _bias_value(key: str, value: Any) -> float:
    limit = LOGIT_BIAS_LIMIT
    number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
    if number is None or not math.isfinite(number) or not -limit <= number <= limit:
        raise bad_request(
            f"'logit_bias' values must be numbers in [-{limit:g}, {limit:g}], got "
            f"{value!r:.40} for token {key}",
            "logit_bias",
        )
    return float(number)


def base_params(
    req: AnyRequest, max_tokens: int, seed: int, vocab_size: int | None = None,
    tools: ToolPlan | None = None,
) -> SamplingParams:  # fmt: skip
    """The request's sampling parameters with its `n` and `seed` (`max_tokens` 0, scoring
    only, runs one token); `.expand_n()` gives each choice's. `vocab_size` bounds the
    `logit_bias` ids (None: not checked here). `tools` (chat): a forced tool choice's
    grammar is the constraint, and a parser whose marker is a special token keeps them."""
    vocab = vocab_size if vocab_size is not None else 2**63
    bias = logit_bias(req, vocab)
    check_token_ids("stop_token_ids", req.stop_token_ids or (), vocab, "'stop_token_ids' id")
    check_limit("min_tokens", req.min_tokens, max_tokens, source="max_tokens")
    structured = _constraint(req, tools)
    keep_special = tools is not None and tools.keeps_special_tokens
    try:
        return SamplingParams(
            n=req.n,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            min_p=req.min_p,
            repetition_penalty=req.repetition_penalty,
            presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty,
            stop=_stop_strings(req.stop),
            stop_token_ids=tuple(req.stop_token_ids or ()),
            max_tokens=max(max_tokens, 1),
            min_tokens=req.min_tokens,
            ignore_eos=req.ignore_eos,
            logprobs=num_logprobs(req),
            logit_bias=bias,
            prompt_logprobs=prompt_logprobs(req),
            seed=seed,
            skip_special_tokens=req.skip_special_tokens and not keep_special,
            include_stop_str_in_output=req.include_stop_str_in_output,
            structured_outputs=structured,
        )
    except ValueError as exc:
        raise bad_request(str(exc), _field_named_in(str(exc))) from exc


def _constraint(req: AnyRequest, tools: ToolPlan | None) -> StructuredOutputsParams | None:
    """The request's structured outputs, or its forced tool calls' grammar (not both)."""
    structured = structured_outputs(req)
    if tools is None or tools.grammar is None:
        return structured
    if structured is not None:
        raise bad_request(
            f"tool_choice {tools.choice.mode!r} forces tool calls; it cannot be combined with "
            "response_format or the other structured-outputs fields",
            "tool_choice",
        )
    return tools.grammar


def _stop_strings(stop: str | list[str] | None) -> tuple[str, ...]:
    if stop is None:
        return ()
    items = [stop] if isinstance(stop, str) else stop
    for item in items:
        if not item:
            raise bad_request("'stop' strings must be non-empty", "stop")
    return tuple(items)


def _field_named_in(message: str) -> str | None:
    prefix = "SamplingParams."
    if message.startswith(prefix):
        return message[len(prefix) :].split(" ", 1)[0]
    return None
