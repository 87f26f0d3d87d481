"""The fingerprint component ``replays`` of a replay deployment (`kernels.replay.plan`'s
docstring): the GPU invariant deployment it computes. Apart from `kernels.replay.plan`
because it builds that GPU plan (`kernels.plan` imports the replay plan's fields)."""

from __future__ import annotations

from samebits.kernels.plan import build_plan
from samebits.kernels.replay.plan import REPLAYED_GPU


def replayed_components(plan, model, certificates: dict) -> dict:
    """The fingerprint component ``replays`` of a replay deployment (module docstring):
    the GPU invariant plan for ``plan``'s head shape, ``model``'s compiled linear variants,
    and ``certificates`` (the gate's component of the GPU deployment)."""
    from samebits.kernels.triton.backend import linear_specializations

    moe = "moe_router" in plan.ops
    gpu_plan = build_plan("invariant", head_dim=plan.head_dim, group=plan.group, device="cuda",
                          dtype="bfloat16", moe=moe)  # fmt: skip
    shapes = [(role, lin.shape[0], lin.shape[1]) for role, lin in model.role_linears()]
    return {
        "plan": gpu_plan.to_dict(),
        "gpu": dict(REPLAYED_GPU),
        "specializations": linear_specializations(shapes),
        "certificates": certificates,
    }
