"""Routing helpers for the mixture-of-experts tests: a tiny qwen3_moe whose router sends every
token to one expert and none to others, and a recorder of each routing call's expert loads."""

from __future__ import annotations

import torch

FAVOURED, SHUNNED = 5, (0, 1)  # the biased router's experts: every token / no token


def bias_router(loaded, favoured: int = FAVOURED, shunned: tuple[int, ...] = SHUNNED):
    """`loaded` (a qwen3_moe `LoadedModel`, changed in place and returned) with every
    embedding's hidden dim 0 set to 3, so dim 0 of each router input is large and positive,
    and at every sparse layer router row `favoured` weighting dim 0 by +3 and the rows
    `shunned` by -3: every token's top expert is `favoured`, no token picks a shunned one."""
    w = loaded.weights
    w["model.embed_tokens.weight"][:, 0] = 3.0
    for i in range(loaded.config.num_hidden_layers):
        name = f"model.layers.{i}.mlp.gate.weight"
        if name in w:
            w[name][favoured, 0] = 3.0
            w[name][list(shunned), 0] = -3.0
    return loaded


def record_expert_counts(dep) -> list[torch.Tensor]:
    """Tokens per expert (a CPU tensor [E]) of every routing call of `dep` from now on
    (forwards of the engine and of Ref alike); the list fills as they run."""
    ops, counts = dep.model.ops, []
    route = ops.moe_route

    def recording(logits, top_k, normalize):
        ids, weights = route(logits, top_k, normalize)
        if not (ids.is_cuda and torch.cuda.is_current_stream_capturing()):
            counts.append(torch.bincount(ids.reshape(-1), minlength=logits.shape[1]).cpu())
        return ids, weights

    ops.moe_route = recording
    return counts


def check_biased_routing(counts: list[torch.Tensor], top_k: int) -> int:
    """Assert every recorded call sent all its tokens to FAVOURED and none to SHUNNED; returns
    the largest number of tokens of one call."""
    tokens = [int(c.sum()) // top_k for c in counts]
    assert counts and all(int(c[FAVOURED]) == n for c, n in zip(counts, tokens, strict=True))
    assert all(int(c[e]) == 0 for c in counts for e in SHUNNED)
    return max(tokens)


def router_logits(n: int, experts: int, seed: int, device: str = "cpu") -> torch.Tensor:
    """Random float32 router logits [n, E] whose first rows hold the hard cases: a tie among
    many experts at the top, most logits below the exp floor, -inf logits, every expert tied,
    a huge spread, signed zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn((n, experts), generator=g) * 4.0
    x[0, : experts // 2] = 1.25  # a tie among many experts at the top
    if n > 1:
        x[1] = torch.linspace(-200.0, 3.0, experts)  # most below the exp floor
    if n > 2:
        x[2, ::3] = float("-inf")
    if n > 3:
        x[3] = 0.0  # every expert tied
    if n > 4:
        x[4] = torch.randn(experts, generator=g) * 1e4  # huge spread
    if n > 5:
        x[5, 1::2] = -0.0  # signed zeros
    return x.to(device)
