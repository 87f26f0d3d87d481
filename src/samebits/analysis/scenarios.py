"""Bounded configurations for the engine model checker, and the suites it runs by default.

A `CheckConfig` fixes the requests (prompts, sampler state, stop rules), the cache and the
scheduler limits; the checker then explores every interleaving of arrivals, aborts (at most
`max_aborts`) and steps, each step picking its token budget from `step_budgets`.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    lookahead: bool = False  # also explore steps scheduled ahead (`("ahead", b)` actions)

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


# Prompts with shared prefixes (block size 2). Token 0 is EOS where a request has it; seeds are
# chosen so that the references end in a mix of ways (EOS, stop token, max_tokens).
# A and C are the same input (prompt and seed): the Deterministic property, and blocks of
# generated tokens shared between requests. B repeats A's second block [3, 4] after a different
# first block (a prefix-blind hash confuses them). D shares A's first two blocks, then diverges.
# E is an 8-token prompt sharing A's first block. F, G, H are short prompts that let a 3-block
# cache hold two requests at once (so preemption happens there too); G is F's prompt with
# another seed, H repeats F's first block [1, 2] as its second block.
A = RequestSpec((1, 2, 3, 4, 5), max_tokens=4, seed=2, eos_token_ids=(0,))  # EOS after 3
B = RequestSpec((6, 7, 3, 4, 5, 8), max_tokens=2, seed=1, eos_token_ids=(0,))  # length 2
C = A
D = RequestSpec((1, 2, 3, 4, 9, 9, 9), max_tokens=4, seed=3, eos_token_ids=(0,))  # EOS after 3
E = RequestSpec((1, 2, 6, 6, 6, 6, 6, 6), max_tokens=2, seed=8, stop_token_ids=(2,))  # stop, 2
F = RequestSpec((1, 2, 3), max_tokens=4, seed=2, eos_token_ids=(0,))  # length 4
G = RequestSpec((1, 2, 3), max_tokens=4, seed=3, eos_token_ids=(0,))  # EOS after 3
H = RequestSpec((5, 6, 1, 2), max_tokens=2, seed=8, eos_token_ids=(0,))  # length 2

ALL_BUDGETS = tuple(range(1, 9))

DEFAULT_SUITE: tuple[CheckConfig, ...] = (
    *(CheckConfig(f"ABC-{n}blocks", (A, B, C), n, ALL_BUDGETS, 3) for n in (3, 4, 5, 6)),
    CheckConfig("FGH-3blocks", (F, G, H), 3, ALL_BUDGETS, 3),
    CheckConfig("FGH-4blocks-2seqs", (F, G, H), 4, ALL_BUDGETS, 2),
    CheckConfig("FGH-6blocks", (F, G, H), 6, ALL_BUDGETS, 3),
    CheckConfig("ABC-4blocks-2aborts", (A, B, C), 4, ALL_BUDGETS, 3, max_aborts=2),
    CheckConfig(
        "ABC-5blocks-no-prefix-cache", (A, B, C), 5, ALL_BUDGETS, 3, enable_prefix_caching=False
    ),
    CheckConfig("ABD-6blocks", (A, B, D), 6, ALL_BUDGETS, 3),
    CheckConfig("ADE-6blocks-len8", (A, D, E), 6, ALL_BUDGETS, 3, max_model_len=8),
    CheckConfig("ABCD-5blocks", (A, B, C, D), 5, (1, 3, 8), 3),
    # steps scheduled ahead (async scheduling with lookahead), with preemption, prefix hits,
    # stop tokens, a length limit, and adds and aborts while a step is in flight
    CheckConfig("FGH-3blocks-lookahead", (F, G, H), 3, (1, 3, 8), 3, lookahead=True),
    CheckConfig("ABC-4blocks-lookahead", (A, B, C), 4, (1, 3, 8), 3, lookahead=True),
    CheckConfig(
        "ADE-6blocks-len8-lookahead", (A, D, E), 6, (1, 3, 8), 3, max_model_len=8, lookahead=True
    ),
)

QUICK_SUITE: tuple[CheckConfig, ...] = (
    CheckConfig("ABC-4blocks-quick", (A, B, C), 4, (1, 2, 5), 3),
    CheckConfig("FGH-3blocks-quick", (F, G, H), 3, (1, 3), 3),
)
