"""Kernel plans and their ops (see plan.py)."""

from samebits.kernels.plan import KernelPlan, build_plan

__all__ = ["KernelPlan", "build_plan"]
