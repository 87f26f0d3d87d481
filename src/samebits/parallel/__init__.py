"""Tensor parallelism with the same bits at every degree (DESIGN.md §2b, issue 30).

One process per rank over torch.distributed (gloo on the CPU, NCCL on cuda): rank 0 runs the
engine (scheduler, KV-cache manager, sampling) and broadcasts each forward's inputs; every
rank runs its shard of the decoder. Column-parallel qkv / gate_up (heads and the MLP's
intermediate split), row-parallel o / down through the split plan (rank r of t owns K ranges
r*S/t .. (r+1)*S/t - 1, the float32 partials are all-gathered and every rank sums the S of
them in range order: the TP = 1 computation), vocab-parallel LM head gathered in rank order;
norms and embeddings replicated. No reduction collective ever touches a value.

Below the engine, above `kernels/` (docs/architecture.md "Where new code goes").
"""

from samebits.parallel.topology import SUPPORTED_DEGREES, TensorParallelError

__all__ = ["SUPPORTED_DEGREES", "TensorParallelError"]
