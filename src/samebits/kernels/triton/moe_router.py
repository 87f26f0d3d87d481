"""The MoE router of the GPU invariant plan in one launch (`_moe_router_kernel`): the bits of
`samebits.kernels.moe.route` (softmax by the portable exp, fixed-tree sum, top-k by exact max
passes with ties to the lower id, rank-order renormalization), with no host sync.

The tiles (rows per program, warps) are a function of the number of experts only, and no
value depends on them (every reduction is an exact max / min or the written tree).
Evidence class: test (`tests/kernels/triton/test_triton_moe_router.py`, interpreter;
`tests/gpu/test_gpu_moe.py`, H200).
"""

from __future__ import annotations

import torch
import triton

from samebits.kernels.triton._moe_router_kernel import moe_router_kernel

ROUTER_ELEMENTS = 512  # logits per program: BLOCK_T = max(1, ROUTER_ELEMENTS // next_pow2(E))
ROUTER_WARPS = 4
# one IEEE rounding per operation, as the torch ops of `kernels.moe.route` round
ROUTER_FP_FUSION = False
ROUTER_DESCRIPTION = (
    "triton router kernel (one launch per MoE layer): `kernels.moe.route` op for op (portable "
    "exp, fixed-tree sum, div_rn, k exact max passes with ties to the lower id, rank-order "
    "renormalization), no FMA contraction; evidence: test"
)


def route(logits: torch.Tensor, top_k: int, normalize: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(ids int64 [n, k], float32 weights [n, k]) from float32 router logits [n, E] on the
    GPU: `samebits.kernels.moe.route`'s bits."""
    if logits.dtype != torch.float32 or logits.dim() != 2:
        raise TypeError(f"router logits must be float32 [n, E], got {logits.dtype} "
                        f"{tuple(logits.shape)}")  # fmt: skip
    n, experts = logits.shape
    if not 1 <= top_k <= experts:
        raise ValueError(f"top_k must be in [1, {experts}], got {top_k}")
    ids = torch.empty((n, top_k), device=logits.device, dtype=torch.int64)
    weights = torch.empty((n, top_k), device=logits.device, dtype=torch.float32)
    if n == 0:
        return ids, weights
    log_e = max(0, (experts - 1).bit_length())
    block_t = max(1, ROUTER_ELEMENTS >> log_e)
    moe_router_kernel[(triton.cdiv(n, block_t),)](
        logits.contiguous(), ids, weights, n, E=experts, TOP_K=top_k, NORMALIZE=normalize,
        BLOCK_T=block_t, LOG_E=log_e, BLOCK_K=triton.next_power_of_2(top_k),
        num_warps=ROUTER_WARPS, enable_fp_fusion=ROUTER_FP_FUSION,
    )  # fmt: skip
    return ids, weights
