"""A mixture of experts on the GPU invariant plan's op set (`TritonOps`: the router as a
float32-output split-plan linear, the grouped expert launch, SiLU-and-mul, RMSNorm kernels), on CPU
through Triton's interpreter in float32, driven by the real engine: batch and chunk scenarios
of the determinism matrix against Ref, with the router biased so one expert takes every token
(CI has no GPU; tests/gpu/test_gpu_moe.py runs the full matrices on one). Kept small: the
interpreter is slow."""

from __future__ import annotations

import pytest
from test_triton_engine import InterpreterTritonOps, _interpreter_plan, register_interpreter_ops

import samebits.deployment as deployment_module
from moe_routing import bias_router, check_biased_routing, record_expert_counts
from samebits.kernels.triton.linear import TritonLinear
from samebits.kernels.triton.moe_grouped import GroupedExperts
from samebits.model import load_model
from samebits.testing.determinism_matrix import MatrixSize, build_scenarios, check_matrix


@pytest.fixture(scope="module")
def triton_moe_deployment(tiny_qwen3_moe_dir):
    with pytest.MonkeyPatch.context() as mp:
        register_interpreter_ops(mp)
        mp.setattr(deployment_module, "build_plan", _interpreter_plan)
        loaded = bias_router(load_model(tiny_qwen3_moe_dir))
        return deployment_module.build_deployment(loaded, "triton-interpreter")


def test_moe_engine_on_triton_ops_matches_ref(triton_moe_deployment):
    dep = triton_moe_deployment
    assert isinstance(dep.model.ops, InterpreterTritonOps)
    block = dep.model.layers[0].moe
    assert isinstance(block.router, TritonLinear) and block.router.role == "router"
    assert isinstance(block.experts, GroupedExperts)  # the grouped expert launch runs
    assert all(dep.qualification.values())
    counts = record_expert_counts(dep)
    size = MatrixSize(vocab=dep.config.vocab_size, n_out=3, batch_sizes=(4,), budgets=(5,),
                      repeats=1)  # fmt: skip
    wanted = {"batch", "chunk"}
    report = check_matrix(dep, [s for s in build_scenarios(size) if s.category in wanted])
    assert report.mismatches == []
    assert all(report.rows[c] > 0 for c in wanted)
    assert check_biased_routing(counts, dep.config.moe.num_experts_per_tok) >= 16
