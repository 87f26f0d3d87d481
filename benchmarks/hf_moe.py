"""transformers' model of a samebits mixture-of-experts checkpoint (qwen3_moe, mixtral), for
the benchmarks that run HF on the same weights (gpu_agreement.py, gpu_serving.py).

transformers 5 keeps a sparse layer's experts as two 3-D parameters, `experts.gate_up_proj`
[E, 2I, H] (expert e's gate rows, then its up rows) and `experts.down_proj` [E, H, I], and its
router as `gate.weight`, under `mlp` for both families; samebits keeps the checkpoint's
per-expert 2-D tensors (`samebits.model.checkpoint.moe_weight_names`). So the HF model cannot
share them: `moe_state` stacks copies, and with `consume` pops each per-expert tensor from the
samebits weights as it is copied (peak memory: one copy of the experts, plus one layer).

Routing is compared per (token, sparse layer): the k expert ids in rank order, ours against
HF's top-k of its own router logits; a set that differs is counted as a near-tie when our
router's k-th and (k+1)-th probabilities are within `NEAR_TIE` of each other, relatively
(bf16 rounding upstream moves them).
"""

from __future__ import annotations

NEAR_TIE = 1e-2  # (p_k - p_(k+1)) / p_k of our router below which a difference is a near-tie


def hf_moe_config(cfg, common: dict):
    """transformers' config of a qwen3_moe / mixtral `ModelConfig` (`common`: the dense keys)."""
    import transformers

    moe = cfg.moe
    if cfg.model_type == "qwen3_moe":
        return transformers.Qwen3MoeConfig(
            **common, num_experts=moe.num_experts, num_experts_per_tok=moe.num_experts_per_tok,
            moe_intermediate_size=moe.moe_intermediate_size, norm_topk_prob=moe.norm_topk_prob,
            decoder_sparse_step=moe.decoder_sparse_step, mlp_only_layers=list(moe.mlp_only_layers),
            use_sliding_window=False, attention_bias=False,
        )  # fmt: skip
    return transformers.MixtralConfig(
        **common, num_local_experts=moe.num_experts, num_experts_per_tok=moe.num_experts_per_tok,
        sliding_window=None,
    )  # fmt: skip


def moe_state(loaded, dtype, consume: bool) -> dict:
    """HF state-dict entries of every sparse layer (router, stacked gate_up and down)."""
    from samebits.model.checkpoint import moe_weight_names

    cfg, w, state = loaded.config, loaded.weights, {}
    for i in range(cfg.num_hidden_layers):
        if not cfg.is_sparse(i):
            continue
        router, experts = moe_weight_names(cfg, f"model.layers.{i}.")
        hf = f"model.layers.{i}.mlp."
        state[hf + "gate.weight"] = (w.pop(router) if consume else w[router]).to(dtype)
        state[hf + "experts.gate_up_proj"] = _stack(
            w, [(g, u) for g, u, _ in experts], dtype, consume
        )
        state[hf + "experts.down_proj"] = _stack(w, [(d,) for _, _, d in experts], dtype, consume)
    return state


def _stack(w: dict, groups: list[tuple[str, ...]], dtype, consume: bool):
    """[E, rows, cols]: expert e's tensors `groups[e]` concatenated along rows (popped from
    `w` as they are copied when `consume`)."""
    import torch

    first = [w[n] for n in groups[0]]
    rows, cols = sum(t.shape[0] for t in first), first[0].shape[1]
    out = torch.empty((len(groups), rows, cols), dtype=dtype, device=first[0].device)
    for e, names in enumerate(groups):
        start = 0
        for name in names:
            t = w.pop(name) if consume else w[name]
            out[e, start : start + t.shape[0]] = t
            start += t.shape[0]
    return out


def is_moe_name(name: str, cfg) -> bool:
    """True for a samebits per-expert or router tensor name (replaced by `moe_state`)."""
    from samebits.model.config import MOE_WEIGHT_NAMES

    if cfg.moe is None:
        return False
    block = MOE_WEIGHT_NAMES[cfg.model_type].block
    return f".{block}.experts." in name or name.endswith(f".{block}.gate.weight")


def our_routing(deployment, run) -> tuple:
    """(`run()`, [(expert ids [n, k], router probabilities [n, E]) of every routing call it
    makes])."""
    import torch

    ops, seen = deployment.model.ops, []
    if deployment.config.moe is None:  # a dense model: nothing routes
        return run(), seen
    route = ops.moe_route

    def recording(logits, top_k, normalize):
        out = route(logits, top_k, normalize)
        seen.append((out[0].cpu(), torch.softmax(logits.float(), dim=-1).cpu()))
        return out

    ops.moe_route = recording
    try:
        return run(), seen
    finally:
        del ops.moe_route


def hf_routing(model, ids: list[int], top_k: int) -> list:
    """HF's top-k expert ids [n, k] per sparse layer for the prompt `ids` (its own router)."""
    import torch

    device = next(model.parameters()).device
    with torch.inference_mode():
        out = model(torch.tensor([ids], device=device), output_router_logits=True)
    probs = [torch.softmax(r.reshape(len(ids), -1).float(), dim=-1) for r in out.router_logits]
    return [torch.topk(p, top_k, dim=-1).indices.cpu() for p in probs]


def routing_report(ours: list, theirs: list, top_k: int) -> dict:
    """Equal (token, layer) routings (rank order, and as sets), the same for the first sparse
    layer alone (whose router input differs from HF's only by one attention block's rounding),
    and of the differing ones how many are near-ties of ours: relative gap
    (p_k - p_(k+1)) / p_k below `NEAR_TIE`."""
    import torch

    rows = []
    for (ids, probs), hf_ids in zip(ours, theirs, strict=True):
        ranked = torch.sort(probs, dim=1, descending=True).values
        gap = (ranked[:, top_k - 1] - ranked[:, top_k]) / ranked[:, top_k - 1]
        same_sets = (torch.sort(ids, dim=1).values == torch.sort(hf_ids, dim=1).values).all(dim=1)
        rows.append(((ids == hf_ids).all(dim=1), same_sets, gap < NEAR_TIE))
    return {"all_layers": _counts(rows), "first_layer": _counts(rows[:1]),
            "near_tie_relative_gap": NEAR_TIE}  # fmt: skip


def _counts(rows: list) -> dict:
    total = sum(int(same.numel()) for same, _, _ in rows)
    equal = sum(int(same.sum()) for same, _, _ in rows)
    sets = sum(int(s.sum()) for _, s, _ in rows)
    near = sum(int(((~s) & tie).sum()) for _, s, tie in rows)
    return {"token_layers": total, "equal_in_rank_order": equal, "equal_as_sets": sets,
            "sets_differ": total - sets, "sets_differ_at_near_ties": near}  # fmt: skip
