"""The sparse layer of a mixture-of-experts decoder (qwen3_moe, mixtral): a router and
`num_experts` SiLU-gated expert MLPs, every op through the plan's op set.

Invariant (with an invariant plan): a token's output of the layer is a function of its own
row only. The router is a row-invariant linear with float32 output; routing (softmax, top-k
with ties to the lower expert id, renormalization) is row-local; each expert's rows run
through that expert's own row-invariant linears whatever the number of tokens routed to it;
the k outputs are added in top-k rank order in float32 (`samebits.kernels.moe` defines each
step). So the layer's bits do not depend on the batch, nor on how tokens spread over experts.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from samebits.kernels.interface import Expert, Linear, Ops
from samebits.kernels.quantized import QuantizedTensor
from samebits.model.checkpoint import moe_weight_names


class MoeBlock:
    """`block(x) -> [n, hidden]` in the activation dtype: the mixture of a sparse layer."""

    def __init__(self, ops: Ops, cfg, w: dict[str, torch.Tensor],
                 blocks: dict[str, QuantizedTensor], prefix: str, release: bool = False):  # fmt: skip
        """`prefix` is "model.layers.<i>"; with `release` each expert's weights (and stored
        forms) are popped from `w` / `blocks` once its linears hold their own copies."""
        moe = cfg.moe
        self.ops = ops
        self.top_k = moe.num_experts_per_tok
        self.normalize = moe.norm_topk_prob
        router, names = moe_weight_names(cfg, prefix + ".")
        self.router: Linear = ops.linear(w[router], None, blocks.get(router), role="router")
        experts: list[Expert] = []
        for gate, up, down in names:
            experts.append(_expert(ops, w, blocks, gate, up, down))
            if release:
                for name in (gate, up, down):
                    w.pop(name, None)
                    blocks.pop(name, None)
        self.experts: Sequence[Expert] = ops.moe_group(experts)
        if release:
            w.pop(router, None)
            blocks.pop(router, None)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        ids, weights = self.route(x)
        return self.ops.moe_experts(x, ids, weights, self.experts)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(expert ids [n, k], float32 weights [n, k]) of the rows of x."""
        return self.ops.moe_route(self.router(x), self.top_k, self.normalize)

    def linears(self) -> list[tuple[str, Linear]]:
        """(role, linear) of the router and of expert 0 (every expert has its shapes)."""
        gate_up, down = self.experts[0]
        return [("router", self.router), ("gate_up", gate_up), ("down", down)]


def _expert(ops: Ops, w, blocks, gate: str, up: str, down: str) -> Expert:
    weight = torch.cat([w[gate], w[up]])
    source = QuantizedTensor.concat([blocks.get(gate), blocks.get(up)])
    gate_up = ops.linear(weight, None, source, role="gate_up")
    return gate_up, ops.linear(w[down], None, blocks.get(down), role="down")
