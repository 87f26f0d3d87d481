"""Bounded configurations for the engine model checker, and the suites it runs by default.

A `CheckConfig` fixes the requests (prompts, sampler state, stop rules), the cache and the
scheduler limits; the checker then explores every interleaving of arrivals, aborts (at most
`max_aborts`) and steps, each step picking its token budget from `step_budgets`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class RequestSpec:
    """One request's input: prompt and sampler state (seed) plus its stop conditions."""

    prompt: tuple[int, ...]
    max_tokens: int
    seed: int = 0
    eos_token_ids: tuple[int, ...] = ()
    stop_token_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class CheckConfig:
    """Bounds of one exhaustive run. Invariant: every prompt fits the cache and the model."""

    name: str
    requests: tuple[RequestSpec, ...]
    num_kv_blocks: int
    step_budgets: tuple[int, ...]
    max_num_seqs: int
    block_size: int = 2
    max_model_len: int = 64
    max_aborts: int = 1
    enable_prefix_caching: bool = True
    num_layers: int = 2
    vocab_size: int = 4

    def __post_init__(self) -> None:
        if not self.requests or not self.step_budgets:
            raise ValueError(f"config {self.name!r}: requests and step_budgets must be non-empty")
        for spec in self.requests:
            if len(spec.prompt) > min(self.num_kv_blocks * self.block_size, self.max_model_len):
                raise ValueError(f"config {self.name!r}: prompt {spec.prompt} does not fit")

    def describe(self) -> str:
        prompts = " ".join(f"{len(s.prompt)}+{s.max_tokens}" for s in self.requests)
        return (
            f"{self.name}: {len(self.requests)} requests (prompt+max_tokens {prompts}), "
            f"block_size {self.block_size}, {self.num_kv_blocks} blocks, budgets "
            f"{list(self.step_budgets)}, max_num_seqs {self.max_num_seqs}, "
            f"<= {self.max_aborts} abort(s)"
        )


# Prompts with shared prefixes (block size 2): A and C are the same input (same prompt and
# seed: the Deterministic property and generated-token block sharing); B repeats A's second
# block [3, 4] after a different first block (a prefix-blind hash would confuse them); D
# shares A's first two blocks then diverges; E is a long prompt sharing A's first block.
# Token 0 is EOS; seeds are chosen so that some references end on it before max_tokens.
A = RequestSpec((1, 2, 3, 4, 5), max_tokens=4, seed=2, eos_token_ids=(0,))
B = RequestSpec((6, 7, 3, 4, 5, 8), max_tokens=2, seed=1, eos_token_ids=(0,))
C = A
D = RequestSpec((1, 2, 3, 4, 9, 9, 9), max_tokens=4, seed=3, eos_token_ids=(0,))
E = RequestSpec((1, 2, 6, 6, 6, 6, 6, 6), max_tokens=2, seed=8, stop_token_ids=(2,))

_SWEEP = tuple(
    CheckConfig(f"abc-{blocks}b-budget{budget}", (A, B, C), blocks, (budget,), 3)
    for blocks in (3, 4, 5, 6)
    for budget in (1, 2, 3, 4, 5, 8)
)

DEFAULT_SUITE: tuple[CheckConfig, ...] = (
    *_SWEEP,
    CheckConfig("abc-4b-budgets1..8", (A, B, C), 4, tuple(range(1, 9)), 3),
    CheckConfig("abd-5b-seqs2", (A, B, D), 5, (1, 3, 8), 2),
    CheckConfig("ade-6b", (A, D, E), 6, (2, 5), 3),
)

QUICK_SUITE: tuple[CheckConfig, ...] = (
    CheckConfig("abc-3b-budget2", (A, B, C), 3, (2,), 3),
    CheckConfig("abc-5b-budgets1,3", (A, B, C), 5, (1, 3), 3),
)


def with_bounds(config: CheckConfig, **changes: object) -> CheckConfig:
    """A copy of `config` with some bounds changed (e.g. for mutation tests)."""
    return replace(config, **changes)
