"""From an API request to the `SamplingParams` of each engine request.

A request with `n` choices (per prompt) becomes `n` engine requests; choice `i` is sampled
with `derive_seed(seed, i)`, so choice 0 equals the same request with n = 1. A request
without `seed` gets a fresh one here, reported back and logged, so every choice replays.
"""

from __future__ import annotations

from samebits.sampling import SamplingParams, derive_seed, new_seed
from samebits.server.config import ServerConfig
from samebits.server.errors import bad_request
from samebits.server.protocol import ChatCompletionRequest, CompletionRequest

AnyRequest = CompletionRequest | ChatCompletionRequest


def check_n(req: AnyRequest, config: ServerConfig) -> None:
    if req.n > config.max_n:
        raise bad_request(f"'n' is {req.n}, the limit is {config.max_n}", "n")


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
    if limit is not None and asked > limit:
        raise bad_request(f"'{param}' is {asked}, the limit is {limit}", param)
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


def base_params(req: AnyRequest, max_tokens: int, seed: int) -> SamplingParams:
    """The request's sampling parameters with n = 1 and `seed`."""
    try:
        return SamplingParams(
            n=1,
            temperature=req.temperature,
            top_p=req.top_p,
            top_k=req.top_k,
            min_p=req.min_p,
            repetition_penalty=req.repetition_penalty,
            presence_penalty=req.presence_penalty,
            frequency_penalty=req.frequency_penalty,
            stop=_stop_strings(req.stop),
            stop_token_ids=tuple(req.stop_token_ids or ()),
            max_tokens=max_tokens,
            ignore_eos=req.ignore_eos,
            logprobs=num_logprobs(req),
            seed=seed,
            skip_special_tokens=req.skip_special_tokens,
            include_stop_str_in_output=req.include_stop_str_in_output,
        )
    except ValueError as exc:
        raise bad_request(str(exc), _field_named_in(str(exc))) from exc


def choice_params(base: SamplingParams, n: int) -> list[SamplingParams]:
    """Parameters of choices 0..n-1: `base` with seed `derive_seed(base.seed, i)`."""
    assert base.seed is not None
    return [base.with_seed(derive_seed(base.seed, i)) for i in range(n)]


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
