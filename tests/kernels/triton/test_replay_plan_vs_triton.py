"""The replay plan (cpu/replay, `kernels/replay/ops.py`) against the GPU invariant plan's op set
(`TritonOps`) run through Triton's interpreter with the GPU's semantics (bf16 activations,
the MMA chain emulated, one rounding per fma: `kernels/replay/interpret.py`): the logits of
every position of a prompt have the same bits. The Triton side runs the shipped kernels as
the GPU plan launches them (the linears' launches for each M, split-K grid at decode-sized M;
fused qkv + RoPE + store; the span kernels; SiLU); the replay runs op by op. Its RMSNorms are
the replay's on both sides: the interpreter's ``tl.sum`` adds in numpy's order, not in the
compiled reduction layout the GPU's (and the replay's) follows, so the row norms are checked
on the H200 instead (benchmarks/replay_rows_check.py); the fused split-K sum + residual +
RMSNorm is certified equal to the op-by-op path it is replaced by here."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

import samebits.deployment as deployment_module
from samebits.engine.engine import LLMEngine
from samebits.engine.runner import cold_logits
from samebits.kernels import registry
from samebits.kernels.cpu import mma_emu
from samebits.kernels.plan import KernelPlan, build_plan
from samebits.kernels.replay import interpret
from samebits.kernels.replay.ops import ReplayOps
from samebits.kernels.triton.backend import TritonOps
from samebits.model import load_model
from samebits.sampling import SamplingParams
from samebits.testing.drive import run_until_done

pytestmark = pytest.mark.skipif(not mma_emu.available(), reason="needs the native MMA emulator")
PLAN_NAME = "triton-interpreter-bf16"


class InterpreterBf16Ops(TritonOps):
    """TritonOps with its tensors on the CPU (the interpreter's), bf16 as on the GPU; its
    RMSNorms are the replay's (module docstring)."""

    def __init__(self, plan: KernelPlan):
        super().__init__(plan)
        self.device = torch.device("cpu")

    rms_norm = ReplayOps.rms_norm
    add_rms_norm = ReplayOps.add_rms_norm
    head_rms_norm = ReplayOps.head_rms_norm

    def linear_add_rms_norm(self, linear, x, residual, w, eps):
        return self.add_rms_norm(linear(x), residual, w, eps)


def _interpreter_plan(name="invariant", num_threads=None, linear_kernel=None, head_dim=64,
                      group=1, device="cpu", dtype=None, moe=False) -> KernelPlan:  # fmt: skip
    plan = build_plan("invariant", head_dim=head_dim, group=group, device="cuda", moe=moe)
    return dataclasses.replace(plan, name=PLAN_NAME, device="cpu", num_threads=1)


def _triton_deployment(path):
    with pytest.MonkeyPatch.context() as mp:
        target = f"{InterpreterBf16Ops.__module__}:{InterpreterBf16Ops.__name__}"
        mp.setitem(registry.OPS_FACTORIES, ("cpu", PLAN_NAME), target)
        mp.setattr(deployment_module, "build_plan", _interpreter_plan)
        return deployment_module.build_deployment(load_model(path), PLAN_NAME)


def _bits(logits) -> np.ndarray:
    return np.ascontiguousarray(logits, np.float32).view(np.uint32)


@pytest.mark.parametrize("arch", ["llama", "qwen3"])  # qwen3: q/k norms, op by op on the GPU
def test_replay_plan_logits_equal_the_gpu_plan_in_the_interpreter(arch, request, monkeypatch):
    path = request.getfixturevalue(f"tiny_{arch}_dir")
    monkeypatch.setenv("SAMEBITS_ALLOW_UNCERTIFIED", "1")  # the interpreter plan is uncertified
    gpu = _triton_deployment(path)
    replay = deployment_module.build_deployment(load_model(path), "replay", device="cpu")
    assert isinstance(replay.model.ops, ReplayOps)
    interpret.gpu_semantics(
        lambda obj, name, value: monkeypatch.setattr(obj, name, value, raising=False)
    )
    prompt = [int(t) for t in np.random.default_rng(3).integers(0, 300, 80)]  # 2 key tiles
    want = _bits(cold_logits(gpu, prompt, all_rows=True))
    got = _bits(cold_logits(replay, prompt, all_rows=True))
    assert got.shape == want.shape == (80, replay.config.vocab_size)
    assert np.array_equal(got, want)
    # decode steps of a batch (decode-sized M: the GPU plan's fused split-K sum + residual +
    # RMSNorm, split-KV decode where a request spans several key tiles)
    prompts = [prompt, prompt[:7], prompt[5:70]]
    want_steps, got_steps = (_decode_logits(dep, prompts) for dep in (gpu, replay))
    assert np.array_equal(got_steps, want_steps)


def _decode_logits(deployment, prompts) -> np.ndarray:
    """Every returned logits row of greedy generations of `prompts`, batched, as bits."""
    engine = LLMEngine.from_deployment(deployment, num_kv_blocks=64)
    params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True, return_logits=True)
    for i, p in enumerate(prompts):
        engine.add_request(str(i), p, params)
    done = run_until_done(engine)
    return np.stack([_bits(np.stack(done[str(i)].outputs[0].logits)) for i in range(len(prompts))])
