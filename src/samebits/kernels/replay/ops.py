"""`ReplayOps` (cpu/replay in `samebits.kernels.registry`): the GPU invariant plan's op set
computed on a CPU, bit for bit, by the replay modules of this package (linear: the split plan
on the MMA emulator; rows: RMSNorm, RoPE, the fused qkv split, SiLU / GeGLU; attention: the
span definition with softexp2; MoE: routing and the ordered combine).

Tensors are torch on the CPU in the GPU plan's dtypes (bf16 activations and KV cache, fp32
residual stream, logits and router logits); every op converts to bits, runs its replay and
converts back (data movement only). Invariant: each op's output bits are those the
corresponding `TritonOps` op writes on the H200 for the same inputs (evidence: the replay
modules' checks on the GPU, `benchmarks/replay_*_check.py`, and the interpreter tests), so a
forward pass is the GPU's, whatever the batch; the fused GPU ops (qkv + RoPE + store, split-K
sum + residual + RMSNorm) run here op by op, which their certificates prove gives the same
bits.
"""

from __future__ import annotations

import numpy as np
import torch

from samebits.kernels.interface import FLOAT32_ROLES
from samebits.kernels.metadata import FlatBatch
from samebits.kernels.moe import InvariantMoe, expert_outputs
from samebits.kernels.placement import TorchPlacement
from samebits.kernels.plan import KernelPlan
from samebits.kernels.replay import attention as ra
from samebits.kernels.replay import moe as rm
from samebits.kernels.replay import rows as rr
from samebits.kernels.replay.linear import ReplayLinear
from samebits.kernels.splitplan import split_plan
from samebits.kernels.triton.attention import KEY_BLOCK, LOG2E  # the kernel's tile, the scale


def bits(t: torch.Tensor) -> np.ndarray:
    """The bits of a bf16 tensor (uint16) or the values of an fp32 one (float32)."""
    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    if t.dtype == torch.float32:
        return t.numpy()
    raise TypeError(f"replay: expected a bfloat16 or float32 tensor, got {t.dtype}")


def tensor(a: np.ndarray) -> torch.Tensor:
    """bf16 bits (uint16) -> a bf16 tensor; fp32 bits (uint32) or values -> an fp32 tensor."""
    a = np.ascontiguousarray(a)
    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.view(np.float32).copy())


class ReplayTorchLinear:
    """A weight of the GPU plan (bf16, its split plan for (N, K, role)) replayed on torch
    tensors: bf16 input [M, K] -> bf16 output, or fp32 for the roles of FLOAT32_ROLES."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, role: str,
                 threads: int | None = None):  # fmt: skip
        n, k = weight.shape
        self.shape = (n, k)
        self.role = role
        out = "float32" if role in FLOAT32_ROLES else "bfloat16"
        b = None if bias is None else bits(bias.to(torch.float32))
        self.replay = ReplayLinear(bits(weight.to(torch.bfloat16)), b, split_plan(n, k, role), out,
                                   threads=threads)  # fmt: skip

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, self.shape[1])
        y = tensor(self.replay(bits(flat.to(torch.bfloat16))))
        return y.reshape(*x.shape[:-1], self.shape[0])


class ReplayOps(InvariantMoe, TorchPlacement):
    """The GPU invariant plan on a CPU (module docstring)."""

    def __init__(self, plan: KernelPlan):
        self.device = torch.device("cpu")
        self.act_dtype = torch.bfloat16
        self.group = plan.group
        self.span = plan.attention_span
        self.threads = plan.num_threads

    def linear(self, weight, bias, source=None, role: str = "") -> ReplayTorchLinear:
        return ReplayTorchLinear(weight, bias, role, self.threads)

    def rms_norm(self, x, w, eps):
        return tensor(rr.rms_norm(bits(x), bits(w), eps))

    def add_rms_norm(self, x, residual, w, eps):
        out, res = rr.add_rms_norm(bits(x), bits(residual), bits(w), eps)
        residual.copy_(tensor(res))
        return tensor(out), residual

    def head_rms_norm(self, x, w, eps) -> None:
        x.copy_(tensor(rr.head_rms_norm(bits(x), bits(w), eps)))

    def rope(self, x, batch: FlatBatch, cos, sin) -> None:
        x.copy_(tensor(rr.rope(bits(x), batch.positions, bits(cos), bits(sin))))

    def silu_mul(self, gate_up):
        return tensor(rr.silu_mul(bits(gate_up)))

    def gelu_mul(self, gate_up):
        return tensor(rr.gelu_mul(bits(gate_up)))

    def moe_route(self, logits, top_k: int, normalize: bool):
        ids, weights = rm.route(bits(logits), top_k, normalize)
        return torch.from_numpy(ids), tensor(weights)

    def moe_experts(self, x, ids, weights, experts):
        outputs = expert_outputs(x, ids, experts, self.silu_mul)
        return tensor(rm.combine(bits(outputs), bits(weights)))

    def attention(self, q, k_cache, v_cache, batch: FlatBatch, scale: float, window: int = 0):
        """Each request's query rows over its keys 0..max position, gathered through its
        block table (the replay reads keys at absolute positions, as the kernel does)."""
        launch = ra.Launch(KEY_BLOCK, self.span, scale * LOG2E)
        out = np.empty(q.shape, np.uint16)
        qb, kb, vb = bits(q), bits(k_cache), bits(v_cache)
        for r in range(len(batch.query_start_loc) - 1):
            lo, hi = int(batch.query_start_loc[r]), int(batch.query_start_loc[r + 1])
            if hi == lo:
                continue
            positions = batch.positions[lo:hi]
            keys = np.arange(int(positions.max()) + 1)
            slots = batch.block_tables[r, keys // batch.block_size] * batch.block_size
            slots = slots + keys % batch.block_size
            out[lo:hi] = ra.paged_attention(qb[lo:hi], kb[slots], vb[slots], positions,
                                            self.group, launch, window)  # fmt: skip
        return tensor(out)


def replay_ops(plan: KernelPlan) -> ReplayOps:
    """The registry's factory."""
    return ReplayOps(plan)
