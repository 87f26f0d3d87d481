"""The op-set registry: a static table from (device, plan name) to the op-set factory, named as
"module.path:factory_name" and imported only when `make_ops` is asked for that pair (the GPU
code is imported only for a CUDA plan). No module registers itself: adding a backend is one
line here (and its factory, which receives the built `KernelPlan` and returns an `Ops`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from samebits.kernels.interface import Ops
    from samebits.kernels.plan import KernelPlan

OpsFactory = Callable[["KernelPlan"], "Ops"]

OPS_FACTORIES: dict[tuple[str, str], str] = {
    ("cpu", "invariant"): "samebits.kernels.cpu.ops:invariant_ops",
    ("cpu", "fast"): "samebits.kernels.cpu.ops:fast_ops",
    ("cpu", "replay"): "samebits.kernels.replay.ops:replay_ops",  # the GPU plan's bits
    ("cuda", "fast"): "samebits.kernels.cpu.ops:fast_ops",  # stock torch on CUDA
    ("cuda", "invariant"): "samebits.kernels.triton.backend:TritonOps",
}


def factory(device: str, plan_name: str) -> OpsFactory:
    """The op-set factory for plans named `plan_name` on `device` ("cpu", "cuda"), imported
    from its module (raises ValueError for a pair the table does not name)."""
    target = OPS_FACTORIES.get((device, plan_name))
    if target is None:
        known = ", ".join(f"{d}/{p}" for d, p in OPS_FACTORIES)
        raise ValueError(f"no kernel plan {plan_name!r} for device {device!r} ({known})")
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def make_ops(plan: KernelPlan) -> Ops:
    """The op set of `plan` (raises ValueError for an unregistered (device, plan) pair)."""
    return factory(plan.device, plan.name)(plan)
