"""CPU replay of the GPU invariant plan (issue 27): the H200's exact bits computed on a CPU.

Imports no Triton (and no torch): a verifier without a GPU runs it. What is replayed now is
the split-plan linear (:mod:`.linear`) and the ordered partial sums of the split-K grid and of
the fused sum + residual add; docs/cpu_replay.md lists what is not yet replayed.
"""

from samebits.kernels.replay.linear import (
    OUT_DTYPES,
    ReplayLinear,
    fp32_to_bf16_bits,
    ordered_sum,
    sum_add_residual,
)

__all__ = ["OUT_DTYPES", "ReplayLinear", "fp32_to_bf16_bits", "ordered_sum", "sum_add_residual"]
