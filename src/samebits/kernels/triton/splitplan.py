"""The split plan (moved to :mod:`samebits.kernels.splitplan`, which imports no Triton, so the
CPU replay of the GPU plan (:mod:`samebits.kernels.replay`) reads the same definition)."""

from samebits.kernels.splitplan import (
    MIN_STEPS_PER_RANGE,
    ROLES,
    ROW_PARALLEL_ROLES,
    SPLIT_CANDIDATES,
    SplitPlan,
    plan_block_k,
    split_plan,
)

__all__ = [
    "MIN_STEPS_PER_RANGE", "ROLES", "ROW_PARALLEL_ROLES", "SPLIT_CANDIDATES", "SplitPlan",
    "plan_block_k", "split_plan",
]  # fmt: skip
