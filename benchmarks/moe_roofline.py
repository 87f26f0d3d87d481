"""The bandwidth roofline of a mixture-of-experts decode step (issue 26): the bytes of the
expert weights the step's routing actually touches, at the H200's HBM bandwidth.

The decode graphs replay their captured routing on the device, so the routing of a step is
read from one more step of the same batch run eagerly (`runner.graphs` set aside for it): with
an invariant plan that step computes what the graph computes (bit for bit, tested by
`tests/gpu/test_gpu_graphs.py`), and its expert ids are those of a graph step at that position.
Per sparse layer the distinct experts routed to are counted; each costs its gate, up and down
weights (3 x hidden x moe_intermediate_size elements of the deployment's weight dtype). The
rest of the step's reads (attention and router weights, the KV cache, lm_head) are reported
apart as `other_weights_bytes`.
"""

from __future__ import annotations

HBM_BYTES_PER_S = 4.8e12  # H200 HBM3e peak (NVIDIA's datasheet figure)


def routed_experts(llm) -> list[int]:
    """Distinct experts per sparse layer in the first forward of one eager engine step (the
    2026-12-02 H200 run counted both forwards of an async step: 96 calls for 48 layers)."""
    import torch

    runner = llm.engine.runner
    ops, graphs, seen = runner.model.ops, runner.graphs, []
    cfg = runner.model.cfg
    route = ops.moe_route

    def recording(logits, top_k, normalize):
        ids, weights = route(logits, top_k, normalize)
        seen.append(int(torch.unique(ids).numel()))
        return ids, weights

    ops.moe_route, runner.graphs = recording, None
    try:
        llm.engine.step()
    finally:
        del ops.moe_route
        runner.graphs = graphs
    sparse = sum(cfg.is_sparse(i) for i in range(cfg.num_hidden_layers))
    return seen[:sparse]  # one forward: with async scheduling a step may launch the next one


def expert_bytes(cfg, element_bytes: int = 2) -> int:
    """Bytes of one expert's gate, up and down weights."""
    return 3 * cfg.hidden_size * cfg.moe.moe_intermediate_size * element_bytes


def roofline(cfg, experts_per_layer: list[int], step_ms: float, total_weight_bytes: int) -> dict:
    """The step against the time its touched expert weights take at HBM bandwidth."""
    touched = sum(experts_per_layer) * expert_bytes(cfg)
    all_experts = cfg.moe.num_experts * len(experts_per_layer) * expert_bytes(cfg)
    roof_ms = touched / HBM_BYTES_PER_S * 1e3
    return {
        "sparse_layers": len(experts_per_layer),
        "mean_experts_touched": sum(experts_per_layer) / max(1, len(experts_per_layer)),
        "expert_bytes_touched": touched,
        "other_weights_bytes": total_weight_bytes - all_experts,
        "roofline_experts_ms": roof_ms,
        "roofline_with_other_weights_ms": (touched + total_weight_bytes - all_experts)
        / HBM_BYTES_PER_S
        * 1e3,
        "step_ms": step_ms,
        "fraction_of_expert_roofline": roof_ms / step_ms,
    }
