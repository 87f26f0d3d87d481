"""The backend interface: device / dtype validation, the (device, plan) registry, and the GPU
plan's clear refusal on a machine without CUDA."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from samebits.config import PlanConfig
from samebits.kernels.backend import make_ops
from samebits.kernels.ops import FastOps, InvariantOps
from samebits.kernels.plan import build_plan


def test_device_defaults_and_bad_values():
    assert PlanConfig().dtype == "float32"
    with pytest.raises(ValueError, match="device must be one of"):
        PlanConfig(device="tpu")
    with pytest.raises(ValueError, match="dtype on cpu"):
        PlanConfig(dtype="bfloat16")


def test_cuda_without_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        PlanConfig(device="cuda")
    from samebits.llm import LLM

    with pytest.raises(ValueError, match="no CUDA GPU"):
        LLM(device="cuda")


def test_registry_builds_the_plans_op_sets():
    assert isinstance(make_ops(build_plan("invariant", 1)), InvariantOps)
    fast = make_ops(build_plan("fast", 1))
    assert isinstance(fast, FastOps) and fast.device.type == "cpu"


def test_registry_refuses_unknown_pairs():
    plan = dataclasses.replace(build_plan("invariant", 1), name="portable")
    with pytest.raises(ValueError, match="no kernel plan 'portable' for device 'cpu'"):
        make_ops(plan)
