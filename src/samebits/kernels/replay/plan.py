"""The replay plan (cpu/replay): the `KernelPlan` fields of a CPU deployment that computes the
GPU invariant plan's bits, and the description of the GPU deployment it replays.

A replay deployment's fingerprint carries ``replays``: the GPU invariant plan it computes (its
plan description for this model's head shape, the compiled linear variants, the certificate
set's status and digest, and the compiler and architecture the replay's definitions were read
from and checked on, `REPLAYED_GPU`). Its numerics id is that GPU deployment's
(`kernels.fingerprint.numerics_components`): a log served on an H200 with Triton 3.6 is
verified by a CPU replay when the two ids are equal, and refused otherwise (another kernel
source, another certificate set, another compiler or architecture).
"""

from __future__ import annotations

import os

from samebits.kernels.interface import ATTENTION_SPAN

# The compiler and architecture the replay modules reproduce: the definitions were read from
# Triton 3.6's sm_90 compilation and checked bit for bit on the H200 (docs/cpu_replay.md).
REPLAYED_GPU = {"triton": "3.6.0", "capability": "9.0"}

REPLAY_OPS = {
    "linear": "replay of the split-plan linear: MMA emulator (kernels/cpu/mma_emu.c) per "
    "range, fp32 range sums in order, bias, cast (kernels/replay/linear.py)",
    "rows": "replay of the row kernels: RMSNorm reductions in the compiled layout, RoPE, "
    "soft-exp SiLU / GeGLU (kernels/replay/rows.py)",
    "attention": "replay of the span definition: key tiles of the kernel's width, softexp2, "
    "MMA-emulated q@k, p@v and p@ones, spans merged in order (kernels/replay/attention.py)",
}
REPLAY_MOE_OPS = {  # a mixture of experts' (added by `kernels.plan.build_plan`)
    "moe_router": "replay of the router: portable exp, fixed tree sum, ties to the lower id "
    "(kernels/replay/moe.py)",
    "moe_experts": "each expert's replayed linears and SiLU on its rows, combined in rank "
    "order in fp32 (kernels/replay/moe.py)",
}


def replay_plan_fields(head_dim: int, group: int, num_threads: int | None = None) -> dict:
    """The `KernelPlan` fields of the replay plan for a model with this head shape; the MMA
    emulator runs on ``num_threads`` (default: every CPU; no bits depend on it)."""
    return {
        "name": "replay", "num_threads": num_threads or os.cpu_count() or 1, "linear_tiles": (), "attention_key_tile": 0,
        "ops": dict(REPLAY_OPS), "linear_kernel": "replay-mma-emu",
        "attention_kernel": "replay-spans", "torch_threads": 0, "device": "cpu",
        "dtype": "bfloat16", "head_dim": head_dim, "group": group,
        "attention_span": ATTENTION_SPAN,
    }  # fmt: skip
