"""Batch-invariant Triton kernels for the GPU (DESIGN §2, §2b).

Every op here gives each output row the same bits whatever the batch, chunking or page layout:
linears follow a per-weight :class:`SplitPlan`; row ops use one fixed program per row;
attention reduces keys in tiles at absolute positions with MMA-computed denominators.
No autotuning, no atomics, no TF32; batch-dependent integers are not specialized on.
"""

from samebits.kernels.triton.attention import (
    KEY_BLOCK,
    AttentionMeta,
    attention_metadata,
    paged_attention,
)
from samebits.kernels.triton.describe import describe, describe_plan
from samebits.kernels.triton.linear import (
    Launch,
    SplitPlan,
    TritonLinear,
    choose_launch,
    linear,
    split_plan,
)
from samebits.kernels.triton.rows import (
    add_rms_norm,
    head_rms_norm,
    qkv_rope_store,
    rms_norm,
    rope,
    silu_mul,
)

__all__ = [
    "KEY_BLOCK",
    "AttentionMeta",
    "Launch",
    "SplitPlan",
    "TritonLinear",
    "add_rms_norm",
    "attention_metadata",
    "choose_launch",
    "describe",
    "describe_plan",
    "head_rms_norm",
    "linear",
    "paged_attention",
    "qkv_rope_store",
    "rms_norm",
    "rope",
    "silu_mul",
    "split_plan",
]
