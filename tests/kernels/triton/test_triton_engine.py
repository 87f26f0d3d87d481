"""The GPU invariant plan's op set (`TritonOps`) driven by the real engine, on CPU through
Triton's interpreter in float32: the decoder, the runner's device batch, the attention
metadata, the KV store and the kernels together pass batch / chunk / prefix scenarios of the
determinism matrix against Ref (CI has no GPU; tests/gpu/ runs the full matrix on one)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import samebits.deployment as deployment_module
from samebits.kernels import registry
from samebits.kernels.plan import KernelPlan, build_plan
from samebits.kernels.triton.backend import TritonOps
from samebits.model import load_model
from samebits.testing.determinism_matrix import MatrixSize, build_scenarios, check_matrix

PLAN_NAME = "triton-interpreter"


class InterpreterTritonOps(TritonOps):
    """TritonOps with its tensors on the CPU and float32 activations (the interpreter's)."""

    def __init__(self, plan: KernelPlan):
        super().__init__(plan)
        self.device = torch.device("cpu")
        self.act_dtype = torch.float32


def _interpreter_plan(name="invariant", num_threads=None, linear_kernel=None, head_dim=64,
                      group=1, device="cpu", dtype=None, moe=False) -> KernelPlan:  # fmt: skip
    plan = build_plan("invariant", head_dim=head_dim, group=group, device="cuda", dtype="float32",
                      moe=moe)  # fmt: skip
    return dataclasses.replace(plan, name=PLAN_NAME, device="cpu", num_threads=1)


def register_interpreter_ops(mp: pytest.MonkeyPatch) -> None:
    """Name `InterpreterTritonOps` as the cpu/PLAN_NAME op set in the registry's table (undone
    with `mp`)."""
    target = f"{InterpreterTritonOps.__module__}:{InterpreterTritonOps.__name__}"
    mp.setitem(registry.OPS_FACTORIES, ("cpu", PLAN_NAME), target)


@pytest.fixture(scope="module")
def triton_deployment(tiny_qwen3_dir):
    with pytest.MonkeyPatch.context() as mp:
        register_interpreter_ops(mp)
        mp.setattr(deployment_module, "build_plan", _interpreter_plan)
        return deployment_module.build_deployment(load_model(tiny_qwen3_dir), PLAN_NAME)


def test_engine_on_triton_ops_matches_ref(triton_deployment):
    dep = triton_deployment
    assert isinstance(dep.model.ops, InterpreterTritonOps)
    assert all(dep.qualification.values())
    size = MatrixSize(vocab=dep.config.vocab_size, n_out=3, batch_sizes=(4,), budgets=(5,),
                      repeats=1)  # fmt: skip
    wanted = {"batch", "chunk", "prefix"}
    report = check_matrix(dep, [s for s in build_scenarios(size) if s.category in wanted])
    assert report.mismatches == []
    assert all(report.rows[c] > 0 for c in wanted) and report.prefix_hits > 0
