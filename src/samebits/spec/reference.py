"""Ref(input, n): the reference semantics every engine view must be a prefix of.

Position i's logits row is the last row of a cold forward pass over the whole history
`prompt + token_0 .. token_{i-1}` (no cache, batch of one); its token is
`sample(row_i, params, seed, i, prompt, tokens[:i], eos_token_ids, allowed_i)`, where
`allowed_i` is the grammar's mask after `tokens[:i]` for a structured-outputs request (the
grammar is then a callable too: prefix -> `GrammarStep`). The model is only a callable here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from samebits.outputs import logits_row_bytes
from samebits.sampling import SamplingParams, sample
from samebits.spec.definition import OutputRecord, RequestView, request_input

LastLogits = Callable[[Sequence[int]], np.ndarray]
Grammar = Callable[[Sequence[int]], Any]  # prefix -> GrammarStep (.allowed, .terminated)


def reference_view(
    last_logits: LastLogits,
    prompt_token_ids: Sequence[int],
    params: SamplingParams,
    n: int,
    eos_token_ids: Sequence[int] = (),
    grammar: Grammar | None = None,
) -> RequestView:
    """Up to `n` records of Ref, stopping after an EOS token (unless `ignore_eos`) or a
    `stop_token_ids` token once `min_tokens` records exist, as the engine does. `last_logits(history)` must return the
    float32 logits row of the history's last token from a cold, batch-of-one forward pass.
    `grammar(tokens)` (structured outputs, e.g. `grammar_step` bound to the deployment's
    tokenizer view and the spec): its `allowed` masks each draw, and a record after which it
    is `terminated` is the last.
    """
    if params.seed is None:
        raise ValueError("reference_view: params.seed must be set (use params.with_seed)")
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise ValueError(f"reference_view: n must be an int >= 0, got {n!r}")
    prompt = [int(t) for t in prompt_token_ids]
    tokens: list[int] = []
    records: list[OutputRecord] = []
    for position in range(n):
        row = last_logits(tuple(prompt + tokens))
        row_bytes = logits_row_bytes(row)  # also checks: 1-D float32
        allowed = None if grammar is None else grammar(tokens).allowed
        token = sample(row, params, params.seed, position, prompt, tokens, eos_token_ids, allowed)
        records.append(OutputRecord(row_bytes, token))
        tokens.append(token)
        if len(tokens) >= params.min_tokens and _stops(token, params, eos_token_ids):
            break
        if grammar is not None and grammar(tokens).terminated:
            break
    return RequestView(request_input(prompt, params), tuple(records))


def _stops(token: int, params: SamplingParams, eos_token_ids: Sequence[int]) -> bool:
    if token in params.stop_token_ids:
        return True
    return not params.ignore_eos and token in eos_token_ids
