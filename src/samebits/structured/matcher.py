"""Per-request grammar matchers over llguidance, and the pure mask function they implement.

The mask (which ids may come next) is a pure function of the grammar, the generated prefix
and the deployment's tokenizer: `grammar_step(view, spec, prefix)` computes it from a fresh
matcher fed the prefix. `GrammarMatcher` computes the same thing incrementally (one matcher
per request, advanced with each accepted token); tests check both agree bit for bit at every
position. Nothing here is shared between requests except the read-only `GrammarTokenizer`,
and llguidance's work limits count steps (lexer fuel, Earley items), never time, so no mask
depends on load, threads or other requests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from samebits.structured.grammar import engine_grammar
from samebits.structured.params import StructuredOutputsParams


class GrammarTokenizer:
    """llguidance's view of a tokenizer (token bytes, EOS ids) over `vocab_size` ids: built
    once per deployment (~0.2 s for a 49k vocabulary), then only read. Ids at or above the
    tokenizer's own vocabulary (a model's padding rows) are never allowed."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        import llguidance

        self.vocab_size = int(vocab_size)
        eos = list(tokenizer.eos_token_ids) or None
        self.engine = llguidance.LLTokenizer(
            tokenizer.backend.to_str(), n_vocab=self.vocab_size, eos_token=eos
        )


@dataclass(frozen=True)
class GrammarStep:
    """The grammar's verdict after a prefix: `allowed` (bool, one per id) and whether the
    grammar has `terminated` (nothing but its end may follow: the request stops)."""

    allowed: np.ndarray
    terminated: bool


class GrammarMatcher:
    """One request's matcher. Invariant: it has accepted exactly `num_accepted` tokens, the
    request's outputs so far, each allowed by the mask before it."""

    def __init__(self, view: GrammarTokenizer, spec: StructuredOutputsParams) -> None:
        import llguidance

        self.vocab_size = view.vocab_size
        self.num_accepted = 0
        self._words = np.zeros((self.vocab_size + 31) // 32, dtype="<i4")
        self._matcher = llguidance.LLMatcher(view.engine, engine_grammar(spec), log_level=0)
        self._check(f"structured_outputs.{spec.kind} is invalid")

    @property
    def terminated(self) -> bool:
        """True once the grammar is complete and cannot be extended."""
        return self._matcher.is_stopped()

    def allowed(self) -> np.ndarray:
        """Bool mask of the ids allowed next (a fresh array, `vocab_size` long)."""
        self._matcher.unsafe_compute_mask_ptr(self._words.ctypes.data, self._words.nbytes)
        self._check("grammar mask failed")
        bits = np.unpackbits(self._words.view(np.uint8), bitorder="little")
        return bits[: self.vocab_size].astype(bool)

    def accept(self, token: int) -> None:
        """Advance by the sampled `token`; ValueError if the grammar rejects it."""
        self._matcher.consume_token(int(token))
        self._check(f"token {token} does not match the grammar")
        self.num_accepted += 1

    def step(self) -> GrammarStep:
        return GrammarStep(self.allowed(), self.terminated)

    def _check(self, what: str) -> None:
        if self._matcher.is_error():
            message = " ".join(self._matcher.get_error().split())[:300]
            raise ValueError(f"{what}: {message}")


def grammar_step(
    view: GrammarTokenizer, spec: StructuredOutputsParams, prefix: Sequence[int]
) -> GrammarStep:
    """The mask after `prefix` (generated tokens) from a fresh matcher: the definition the
    per-request `GrammarMatcher` must agree with bit for bit."""
    matcher = GrammarMatcher(view, spec)
    for token in prefix:
        matcher.accept(token)
    return matcher.step()
