"""Sampling parameters and the pure sampler.

The sampler is a pure function of `(logits_row, sampler_state, position)` plus the token
history the penalties read: it keeps no state, draws from no shared generator and never
mutates its inputs. Its randomness is counter-based noise keyed by `(seed, position, vocab id)`,
so a request's token at output position `i` does not depend on which other requests shared its
batch, or on how often the sampler was called before. Every array it builds has the length of
the vocabulary, and every order-sensitive reduction is a left-to-right `np.cumsum`, so the
floating-point work depends on nothing but the row, the parameters and the position.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from samebits.outputs import describe_value
from samebits.structured.params import StructuredOutputsParams

MAX_LOGPROBS = 20
SEED_LIMIT = 2**63
LOGIT_BIAS_LIMIT = 100.0  # OpenAI's range for a logit_bias value: [-100, 100]

# Fields that decide which token is drawn at an output position (with `seed`). The others only
# decide when a request stops or what is reported, never the record at a given position —
# except that with `min_tokens > 0`, `stop_token_ids` and `ignore_eos` decide which ids are
# masked (MIN_TOKENS_FIELDS, added to the sampler state then).
SAMPLER_FIELDS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "min_tokens",
    "seed",
)
MIN_TOKENS_FIELDS = ("stop_token_ids", "ignore_eos")
# Added to the sampler state when set: the grammar decides which ids may be drawn.
STRUCTURED_FIELDS = ("structured_outputs",)


@dataclass(frozen=True)
class SamplingParams:
    """Sampling parameters of one request (vLLM names). Validated on construction.

    Invariants after `__post_init__`: float fields are `float`, `stop` is a tuple of non-empty
    strings, `stop_token_ids` a tuple of non-negative ints, `top_k == 0` means disabled
    (`-1` is accepted and stored as 0), `seed` is None or in `[0, 2**63)`, `0 <= min_tokens
    <= max_tokens`, `logit_bias` a tuple of `(token id, bias)` pairs sorted by id with
    distinct ids and finite biases in [-100, 100] (given as a dict `{id: bias}`, ids as ints
    or decimal strings, or as pairs; `dict(params.logit_bias)` gives the mapping back).

    vLLM semantics: `min_tokens` masks EOS (unless `ignore_eos`) and `stop_token_ids` to
    -inf while fewer than `min_tokens` tokens were generated, and stop strings are checked
    only after more than `min_tokens` tokens; `logit_bias` is added to the logits row before
    the penalties and sampling; `prompt_logprobs=k` returns, for every prompt position after
    the first, the logprob of the prompt token plus the top k (`RequestOutput.prompt_logprobs`,
    position 0 is None). Logprobs (sampled and prompt) are those of the raw row: they see
    neither `logit_bias` nor penalties nor temperature (vLLM's default "raw_logprobs").

    `structured_outputs` (a `StructuredOutputsParams`, or its dict form): the output must
    match that JSON schema / regex / choice / grammar; ids the grammar forbids after the
    tokens so far are set to -inf (`sample`'s `allowed`), and the request stops ("stop")
    once the grammar is complete. ValueError here for a spec the grammar engine rejects.
    """

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    max_tokens: int = 16
    ignore_eos: bool = False
    logprobs: int | None = None
    seed: int | None = None
    return_logits: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    min_tokens: int = 0
    logit_bias: tuple[tuple[int, float], ...] = ()
    prompt_logprobs: int | None = None
    structured_outputs: StructuredOutputsParams | None = None

    def __post_init__(self) -> None:
        _check_int("n", self.n, 1)
        self._set_float("temperature", 0.0, math.inf, lo_open=False)
        self._set_float("top_p", 0.0, 1.0, lo_open=True)
        _check_int("top_k", self.top_k, -1)
        object.__setattr__(self, "top_k", max(self.top_k, 0))
        self._set_float("min_p", 0.0, 1.0, lo_open=False)
        self._set_float("repetition_penalty", 0.0, math.inf, lo_open=True)
        self._set_float("presence_penalty", -2.0, 2.0, lo_open=False)
        self._set_float("frequency_penalty", -2.0, 2.0, lo_open=False)
        object.__setattr__(self, "stop", _normalize_stop(self.stop))
        object.__setattr__(self, "stop_token_ids", _normalize_token_ids(self.stop_token_ids))
        _check_int("max_tokens", self.max_tokens, 1)
        _check_int("min_tokens", self.min_tokens, 0, self.max_tokens)
        object.__setattr__(self, "logit_bias", _normalize_logit_bias(self.logit_bias))
        if self.logprobs is not None:
            _check_int("logprobs", self.logprobs, 0, MAX_LOGPROBS)
        if self.prompt_logprobs is not None:
            _check_int("prompt_logprobs", self.prompt_logprobs, 0, MAX_LOGPROBS)
        if self.seed is not None:
            _check_int("seed", self.seed, 0, SEED_LIMIT - 1)
        for name in ("ignore_eos", "return_logits", "skip_special_tokens"):
            _check_bool(name, getattr(self, name))
        _check_bool("include_stop_str_in_output", self.include_stop_str_in_output)
        object.__setattr__(
            self, "structured_outputs", _normalize_structured(self.structured_outputs)
        )

    def _set_float(self, name: str, lo: float, hi: float, *, lo_open: bool) -> None:
        value = getattr(self, name)
        object.__setattr__(self, name, _check_float(name, value, lo, hi, lo_open=lo_open))

    def with_seed(self, seed: int) -> SamplingParams:
        """A copy with `seed` set (validated like the constructor)."""
        return dataclasses.replace(self, seed=seed)

    def expand_n(self) -> list[SamplingParams]:
        """The `n` single-choice parameters of an n-choice request: choice `i` is this with
        `n=1` and seed `derive_seed(seed, i)`, so choice 0 keeps `seed` and equals the same
        request with n = 1. The one place n > 1 is expanded (`LLM`, the server).

        Requires `seed` to be set (a caller without one draws `new_seed()` first and keeps
        it, so every choice replays)."""
        if self.seed is None:
            raise ValueError("SamplingParams.seed must be set to expand n choices, got None")
        return [
            dataclasses.replace(self, n=1, seed=derive_seed(self.seed, i)) for i in range(self.n)
        ]

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe full state; `SamplingParams.from_dict(p.to_dict()) == p`.

        `logit_bias` is written as a list of `[id, bias]` pairs (JSON object keys would be
        strings); `structured_outputs` as `StructuredOutputsParams.to_dict()` or None."""
        out: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name == "logit_bias":
                value = [[token, bias] for token, bias in value]
            elif field.name == "structured_outputs" and value is not None:
                value = value.to_dict()
            out[field.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SamplingParams:
        """Inverse of `to_dict`. Unknown keys raise ValueError; missing keys take defaults."""
        if not isinstance(data, Mapping):
            raise ValueError(f"SamplingParams.from_dict needs a mapping, got {type(data).__name__}")
        known = {field.name for field in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"SamplingParams.from_dict: unknown field(s) {unknown}")
        return cls(**dict(data))

    def sampler_state(self) -> tuple[tuple[str, Any], ...]:
        """Hashable state that decides the token at each position: `SAMPLER_FIELDS` in order,
        then `MIN_TOKENS_FIELDS` when `min_tokens > 0` (the masked ids depend on them), then
        `STRUCTURED_FIELDS` when `structured_outputs` is set.

        Requires `seed` to be set (a request gets one at admission).
        """
        if self.seed is None:
            raise ValueError("SamplingParams.seed must be set to form a sampler state, got None")
        names = SAMPLER_FIELDS + (MIN_TOKENS_FIELDS if self.min_tokens > 0 else ())
        names += STRUCTURED_FIELDS if self.structured_outputs is not None else ()
        return tuple((name, getattr(self, name)) for name in names)


def _fail(name: str, requirement: str, value: object) -> ValueError:
    return ValueError(f"SamplingParams.{name} must be {requirement}, got {value!r}")


def _check_int(name: str, value: object, lo: int, hi: int | None = None) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail(name, "an int", value)
    if value < lo or (hi is not None and value > hi):
        bound = f">= {lo}" if hi is None else f"in [{lo}, {hi}]"
        raise _fail(name, bound, value)


def _check_float(name: str, value: object, lo: float, hi: float, *, lo_open: bool) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise _fail(name, "a number", value)
    number = float(value)
    too_low = number <= lo if lo_open else number < lo
    if not math.isfinite(number) or too_low or number > hi:
        interval = f"{'(' if lo_open else '['}{lo}, {hi}{']' if math.isfinite(hi) else ')'}"
        raise _fail(name, f"a finite number in {interval}", value)
    return number


def _check_bool(name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise _fail(name, "a bool", value)


def _normalize_structured(spec: object) -> StructuredOutputsParams | None:
    if spec is None or isinstance(spec, StructuredOutputsParams):
        return spec
    if isinstance(spec, Mapping):
        return StructuredOutputsParams.from_dict(spec)
    raise _fail("structured_outputs", "a StructuredOutputsParams, a dict or None", spec)


def _normalize_stop(stop: object) -> tuple[str, ...]:
    items = (stop,) if isinstance(stop, str) else stop
    if not isinstance(items, list | tuple):
        raise _fail("stop", "a str or a list of str", stop)
    for item in items:
        if not isinstance(item, str) or not item:
            raise _fail("stop", "made of non-empty strings", stop)
    return tuple(items)


def _normalize_logit_bias(bias: object) -> tuple[tuple[int, float], ...]:
    if bias is None:
        return ()
    if isinstance(bias, Mapping):
        items = list(bias.items())
    elif isinstance(bias, list | tuple):
        items = list(bias)
        for item in items:
            if not isinstance(item, list | tuple) or len(item) != 2:
                raise _fail("logit_bias", "a dict {token id: bias} or (id, bias) pairs", bias)
    else:
        raise _fail("logit_bias", "a dict {token id: bias} or (id, bias) pairs", bias)
    out: dict[int, float] = {}
    limit = LOGIT_BIAS_LIMIT
    for key, value in items:
        token = _bias_token_id(key)
        if token is None:
            raise _fail("logit_bias", "keyed by token ids (ints >= 0 or decimal strings)", bias)
        if token in out:
            raise _fail("logit_bias", "keyed by distinct token ids", bias)
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if number is None or not -limit <= float(number) <= limit:  # NaN fails too
            need = f"made of finite numbers in [-{limit:g}, {limit:g}] (id {key!r})"
            raise _fail("logit_bias", need, bias)
        out[token] = float(number)
    return tuple(sorted(out.items()))


def _bias_token_id(key: object) -> int | None:
    if isinstance(key, str) and key.isascii() and key.isdigit():
        return int(key)
    if isinstance(key, int) and not isinstance(key, bool) and key >= 0:
        return key
    return None


def _normalize_token_ids(ids: object) -> tuple[int, ...]:
    if not isinstance(ids, list | tuple):
        raise _fail("stop_token_ids", "a list of ints", ids)
    for item in ids:
        if not isinstance(item, int) or isinstance(item, bool) or item < 0:
            raise _fail("stop_token_ids", "made of non-negative ints", ids)
    return tuple(ids)


# ---------------------------------------------------------------------------------------------
# Seeds


def derive_seed(seed: int, index: int) -> int:
    """Seed of choice `index` of a request with seed `seed` (for n > 1).

    Index 0 is the seed itself, so choice 0 of an n-choice request equals the n=1 request.
    Other indices hash `(seed, index)` with SHA-256 into `[0, 2**63)`; stable across runs.
    """
    _check_int("seed", seed, 0, SEED_LIMIT - 1)
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise ValueError(f"derive_seed: index must be an int >= 0, got {index!r}")
    if index == 0:
        return seed
    digest = hashlib.sha256(f"samebits.derive_seed:{seed}:{index}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def new_seed() -> int:
    """A fresh seed in `[0, 2**63)` from the OS entropy pool (for requests without one)."""
    return secrets.randbits(63)


# ---------------------------------------------------------------------------------------------
# Counter-based noise: splitmix64 finalizer over (seed, position, vocab id)

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _mix64(x: int) -> int:
    x &= _MASK64
    x = ((x ^ (x >> 30)) * _MIX1) & _MASK64
    x = ((x ^ (x >> 27)) * _MIX2) & _MASK64
    return x ^ (x >> 31)


def _mix64_array(x: np.ndarray) -> np.ndarray:
    """`_mix64` on a uint64 array (numpy uint64 array arithmetic wraps modulo 2**64)."""
    x = x ^ (x >> np.uint64(30))
    x *= np.uint64(_MIX1)
    x ^= x >> np.uint64(27)
    x *= np.uint64(_MIX2)
    return x ^ (x >> np.uint64(31))


def noise_key(seed: int, position: int) -> int:
    """The 64-bit stream key of `(seed, position)`; distinct positions give distinct keys."""
    return _mix64(_mix64(seed) + position * _GOLDEN)


def uniform_noise(seed: int, position: int, vocab_size: int) -> np.ndarray:
    """Uniforms in the open interval (0, 1), one per vocab id, as float64.

    Element `i` is a pure function of `(seed, position, i)`: the splitmix64 output number
    `i + 1` of the stream keyed by `noise_key(seed, position)`, top 53 bits, centred in its
    cell (`(bits + 0.5) / 2**53`). Independent of `vocab_size` beyond the array's length.
    """
    _check_int("seed", seed, 0, SEED_LIMIT - 1)
    _check_nonnegative("position", position)
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
        raise ValueError(f"uniform_noise: vocab_size must be an int >= 1, got {vocab_size!r}")
    counters = np.arange(1, vocab_size + 1, dtype=np.uint64) * np.uint64(_GOLDEN)
    bits = _mix64_array(counters + np.uint64(noise_key(seed, position)))
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def _check_nonnegative(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be an int >= 0, got {value!r}")


# ---------------------------------------------------------------------------------------------
# The sampler


def sample(
    logits: np.ndarray,
    params: SamplingParams,
    seed: int,
    position: int,
    prompt_token_ids: Sequence[int],
    output_token_ids: Sequence[int],
    eos_token_ids: Sequence[int] = (),
    allowed: np.ndarray | None = None,
) -> int:
    """Draw the token at output `position`. Pure: same arguments -> same token; no mutation.

    Pipeline (float64, full vocabulary): `processed_logits` (logit_bias, the min_tokens mask,
    the grammar's `allowed` mask, penalties); if `temperature == 0` greedy argmax (ties -> lowest id); otherwise scale by
    1/temperature, keep `truncation_mask` (top_k, top_p, min_p) and return the argmax of
    `scaled + Gumbel(uniform_noise(seed, position))` over the kept ids (ties -> lowest id).
    `eos_token_ids` (the deployment's EOS ids) only matter while `position < min_tokens`.
    `allowed` (structured outputs): a bool array, one per id, of the ids the grammar allows
    after the outputs so far (`samebits.structured.matcher.grammar_step`); None: all.
    """
    _check_int("seed", seed, 0, SEED_LIMIT - 1)
    _check_nonnegative("position", position)
    if params.temperature == 0.0 and _row_unchanged(params, position, allowed):
        return _greedy(logits, prompt_token_ids, output_token_ids)
    x = processed_logits(
        logits, params, position, prompt_token_ids, output_token_ids, eos_token_ids, allowed
    )
    if params.temperature == 0.0:
        return int(np.argmax(x))
    scaled = (x - x.max()) / params.temperature
    keep = truncation_mask(scaled, params)
    gumbel = -np.log(-np.log(uniform_noise(seed, position, x.size)))
    return int(np.argmax(np.where(keep, scaled + gumbel, -np.inf)))


def _row_unchanged(params: SamplingParams, position: int, allowed: np.ndarray | None) -> bool:
    """Whether `processed_logits` returns the row's own values (widened to float64): no bias,
    no min_tokens mask at this position, no grammar mask, no penalty."""
    return (
        not params.logit_bias
        and position >= params.min_tokens
        and allowed is None
        and params.repetition_penalty == 1.0
        and params.frequency_penalty == 0.0
        and params.presence_penalty == 0.0
    )


def _greedy(
    logits: np.ndarray, prompt_token_ids: Sequence[int], output_token_ids: Sequence[int]
) -> int:
    """`argmax(processed_logits(...))` for a row `processed_logits` leaves unchanged, without
    its float64 copy: widening is exact and monotone, so the argmax (first index of the
    maximum) and the checks are those of the float64 row. The same errors are raised: bad
    rows and histories as in `processed_logits`, and `_check_row_values`' two cases, read
    off the argmax (it is the first NaN if any, else the first +inf if any, else -inf only
    when no entry is finite)."""
    if not isinstance(logits, np.ndarray) or logits.ndim != 1 or logits.size == 0:
        raise ValueError(
            f"logits must be a non-empty 1-D numpy array, got {describe_value(logits)}"
        )
    if not np.issubdtype(logits.dtype, np.floating):
        raise ValueError(f"logits must have a floating dtype, got {logits.dtype}")
    _token_array("prompt_token_ids", prompt_token_ids, logits.size)
    _token_array("output_token_ids", output_token_ids, logits.size)
    top = int(np.argmax(logits))
    return greedy_token(top, float(logits[top]))


def is_plain_greedy(params: SamplingParams, position: int, allowed: np.ndarray | None) -> bool:
    """Whether `sample` at output `position` is the argmax of the raw float32 row
    (temperature 0 and `processed_logits` leaves the row as it is): the token is then
    `greedy_token` of the row's argmax, wherever that argmax is computed."""
    return params.temperature == 0.0 and _row_unchanged(params, position, allowed)


def greedy_token(index: int, value: float) -> int:
    """The token `sample` returns for a plain-greedy row (`is_plain_greedy`) whose argmax is
    `index` with value `value`: the argmax taken as numpy's (the first index of the
    maximum, a NaN counting as the maximum). Raises `sample`'s ValueError when that value
    is NaN or +inf, or -inf (no finite entry)."""
    if math.isnan(value) or value == math.inf:
        raise ValueError("logits after penalties contain NaN or +inf")
    if value == -math.inf:
        raise ValueError("logits after penalties have no finite entry (every token is masked)")
    return index


def processed_logits(
    logits: np.ndarray,
    params: SamplingParams,
    position: int,
    prompt_token_ids: Sequence[int],
    output_token_ids: Sequence[int],
    eos_token_ids: Sequence[int] = (),
    allowed: np.ndarray | None = None,
) -> np.ndarray:
    """The float64 row the sampler draws from (the input is not touched), in vLLM's order:
    `logit_bias` added; while `position < min_tokens`, `min_tokens_banned_ids` set to -inf;
    ids outside `allowed` (when given) set to -inf; then `apply_penalties`. Each step is elementwise, so the row stays a pure function of
    (row, params, position, history)."""
    x = _float64_row(logits)
    for token, bias in params.logit_bias:
        if token >= x.size:
            raise ValueError(f"logit_bias token id {token} is out of range [0, {x.size})")
        x[token] += bias
    if position < params.min_tokens:
        banned = [t for t in min_tokens_banned_ids(params, eos_token_ids) if t < x.size]
        x[banned] = -np.inf
    if allowed is not None:
        x[~_allowed_mask(allowed, x.size)] = -np.inf
    return _penalize(x, params, prompt_token_ids, output_token_ids)


def _allowed_mask(allowed: object, vocab_size: int) -> np.ndarray:
    if not isinstance(allowed, np.ndarray) or allowed.dtype != np.bool_:
        raise ValueError(f"allowed must be a bool numpy array, got {describe_value(allowed)}")
    if allowed.shape != (vocab_size,):
        raise ValueError(f"allowed has shape {allowed.shape}, the row has {vocab_size} ids")
    return allowed


def min_tokens_banned_ids(params: SamplingParams, eos_token_ids: Sequence[int]) -> list[int]:
    """Ids masked while fewer than `min_tokens` outputs exist: `stop_token_ids`, and the EOS
    ids unless `ignore_eos` (vLLM's min_tokens logits processor), sorted."""
    banned = set(params.stop_token_ids)
    if not params.ignore_eos:
        banned.update(int(t) for t in eos_token_ids)
    return sorted(banned)


def apply_penalties(
    logits: np.ndarray,
    params: SamplingParams,
    prompt_token_ids: Sequence[int],
    output_token_ids: Sequence[int],
) -> np.ndarray:
    """A new float64 row with the penalties applied (the input is not touched).

    Repetition (HF/vLLM): ids seen in prompt or output get positive logits divided and
    negative ones multiplied by `repetition_penalty`. Then, over output ids only,
    `logit -= frequency_penalty * count` and `logit -= presence_penalty * (count > 0)`.
    """
    return _penalize(_float64_row(logits), params, prompt_token_ids, output_token_ids)


def _penalize(
    x: np.ndarray,
    params: SamplingParams,
    prompt_token_ids: Sequence[int],
    output_token_ids: Sequence[int],
) -> np.ndarray:
    """`apply_penalties` in place on a float64 row; returns it."""
    prompt = _token_array("prompt_token_ids", prompt_token_ids, x.size)
    output = _token_array("output_token_ids", output_token_ids, x.size)
    if params.repetition_penalty != 1.0:
        seen = np.unique(np.concatenate([prompt, output]))
        rows = x[seen]
        x[seen] = np.where(
            rows > 0, rows / params.repetition_penalty, rows * params.repetition_penalty
        )
    if params.frequency_penalty != 0.0 or params.presence_penalty != 0.0:
        counts = np.bincount(output, minlength=x.size).astype(np.float64)
        x -= params.frequency_penalty * counts
        x -= params.presence_penalty * (counts > 0)
    _check_row_values(x, "logits after penalties")
    return x


def truncation_mask(scaled: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Boolean mask of the ids that stay candidates after top_k, top_p and min_p.

    `scaled` is the temperature-scaled row shifted so that its max is 0. Ranking is a stable
    descending sort (ties -> lower id first). top_k keeps the first k ranked ids. top_p keeps
    a ranked id while the probability mass ranked before it (within top_k) is below
    `top_p` times that mass's total, so at least the top id stays. min_p keeps ids whose
    probability is at least `min_p` times the top probability. The top id is always kept.
    """
    keep = np.isfinite(scaled)
    top_k_active = 0 < params.top_k < scaled.size
    if top_k_active or params.top_p < 1.0:
        order = np.argsort(-scaled, kind="stable")
        if top_k_active:
            keep[order[params.top_k :]] = False
        if params.top_p < 1.0:
            keep &= _top_p_mask(scaled, keep, order, params.top_p)
    if params.min_p > 0.0:
        keep &= np.exp(scaled) >= params.min_p
    return keep


def _top_p_mask(
    scaled: np.ndarray, keep: np.ndarray, order: np.ndarray, top_p: float
) -> np.ndarray:
    weights = np.where(keep, np.exp(scaled), 0.0)[order]
    running = np.cumsum(weights)
    mass_before = np.concatenate(([0.0], running[:-1]))
    mask = np.empty(scaled.size, dtype=bool)
    mask[order] = mass_before < top_p * running[-1]
    return mask


def compute_logprobs(logits: np.ndarray, token_id: int, num_top: int) -> dict[int, float]:
    """Log-softmax of the raw row: `{token_id: lp, *top num_top ids}` (sampled id first).

    Top ids are ranked by logit, ties -> lower id first. Deterministic (sequential sum).
    """
    x = _float64_row(logits)
    _check_row_values(x, "logits")
    if not isinstance(token_id, int | np.integer) or not 0 <= int(token_id) < x.size:
        raise ValueError(f"compute_logprobs: token_id must be in [0, {x.size}), got {token_id!r}")
    if not isinstance(num_top, int) or isinstance(num_top, bool) or num_top < 0:
        raise ValueError(f"compute_logprobs: num_top must be an int >= 0, got {num_top!r}")
    shifted = x - x.max()
    logprobs = shifted - math.log(float(np.cumsum(np.exp(shifted))[-1]))
    out = {int(token_id): float(logprobs[int(token_id)])}
    if num_top == 0:
        return out
    for top_id in np.argsort(-x, kind="stable")[:num_top]:
        out.setdefault(int(top_id), float(logprobs[top_id]))
    return out


def _float64_row(logits: np.ndarray) -> np.ndarray:
    if not isinstance(logits, np.ndarray) or logits.ndim != 1 or logits.size == 0:
        raise ValueError(
            f"logits must be a non-empty 1-D numpy array, got {describe_value(logits)}"
        )
    if not np.issubdtype(logits.dtype, np.floating):
        raise ValueError(f"logits must have a floating dtype, got {logits.dtype}")
    return logits.astype(np.float64, copy=True)


def _check_row_values(x: np.ndarray, what: str) -> None:
    if np.isnan(x).any() or np.isposinf(x).any():
        raise ValueError(f"{what} contain NaN or +inf")
    if not np.isfinite(x).any():
        raise ValueError(f"{what} have no finite entry (every token is masked)")


def _token_array(name: str, ids: Sequence[int], vocab_size: int) -> np.ndarray:
    array = np.asarray(ids).reshape(-1)
    if array.size == 0:
        return array.astype(np.int64)
    if array.dtype.kind not in "iu" or array.min() < 0 or array.max() >= vocab_size:
        raise ValueError(f"{name} must be int token ids in [0, {vocab_size}), got {list(ids)[:8]}")
    return array.astype(np.int64)
