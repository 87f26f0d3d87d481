"""The KernelPlan: one kernel and one static configuration per op, chosen once at start-up.

Invariant: a plan is built from static facts only (plan name, thread count, model shapes) and
is never consulted with runtime state (batch size, chunk length, cache placement). The choice
of kernels is per device: `samebits.kernels.cpu.plan` and `samebits.kernels.triton.plan`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import torch

from samebits.kernels.interface import ATTENTION_SPAN


@dataclass(frozen=True)
class KernelPlan:
    """Which kernel runs each op, with its static configuration."""

    name: str
    num_threads: int
    linear_tiles: tuple[int, ...]
    attention_key_tile: int
    ops: dict[str, str] = field(hash=False)
    linear_kernel: str = "mkl-tiles"
    attention_kernel: str = "numba"
    torch_threads: int = 0  # torch's intra-op threads during a forward; 0: num_threads
    device: str = "cpu"
    dtype: str = "float32"  # activations, KV cache and (GPU) weights; residual/logits float32
    head_dim: int = 0  # the model's; attention kernels are specialised on it
    group: int = 1  # query heads per KV head
    attention_span: int = ATTENTION_SPAN  # keys per span (a multiple of every key tile)
    # why the native kernels are not used although the plan would use them (the build failed);
    # shown by describe(), not part of to_dict() (the fingerprint has linear_kernel)
    native_fallback: str = field(default="", compare=False)
    # the fused units (`certified.units` keys) the GPU plan runs op by op because they have no
    # certificate and their op-by-op path has (`certified.gate.resolve`): the same bits, so
    # not in to_dict(); the certificate component lists them
    op_by_op: tuple[str, ...] = field(default=(), compare=False)

    def intra_op_threads(self) -> int:
        """Threads torch may use inside a forward pass. With the native kernels torch only
        moves data, and one thread keeps its OpenMP workers from spinning on the cores the
        kernels' own pool runs on."""
        return self.torch_threads or self.num_threads

    def apply_threads(self) -> None:
        """Set torch's intra-op thread count for a CPU plan (process-wide; cheap if unchanged)."""
        if self.device == "cpu" and torch.get_num_threads() != self.intra_op_threads():
            torch.set_num_threads(self.intra_op_threads())

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["native_fallback"], d["op_by_op"]
        return d

    def with_op_by_op(self, certificates: dict | None) -> KernelPlan:
        """This plan running op by op the fused units a certificate component names."""
        keys = tuple((certificates or {}).get("op_by_op", ()))
        return replace(self, op_by_op=keys) if keys else self

    def describe(self) -> str:
        threads = f"threads={self.num_threads}"
        if self.intra_op_threads() != self.num_threads:
            threads += f", torch intra-op threads={self.intra_op_threads()}"
        if self.device != "cpu":
            threads = f"device={self.device}, dtype={self.dtype}"
        lines = [f"kernel plan: {self.name} ({threads})"]
        lines += [f"  {op:<18} {kernel}" for op, kernel in self.ops.items()]
        if self.op_by_op:
            lines.append(f"  NOTE: {len(self.op_by_op)} fused launch(es) run op by op (no "
                         f"certificate; their op-by-op path has one): {', '.join(self.op_by_op)}")  # fmt: skip
        if self.native_fallback:
            lines.append(f"  NOTE: the native C kernels failed to build, so the plan runs "
                         f"mkl-tiles + numba: {self.native_fallback}")  # fmt: skip
        return "\n".join(lines)


def build_plan(
    name: str = "invariant", num_threads: int | None = None, linear_kernel: str | None = None,
    head_dim: int = 64, group: int = 1, device: str = "cpu", dtype: str | None = None,
    moe: bool = False,
) -> KernelPlan:  # fmt: skip
    """Build the plan and apply its thread counts to torch and numba (process-wide; the model
    re-applies torch's at every forward, see `KernelPlan.apply_threads`).

    CPU (`samebits.kernels.cpu.plan.cpu_plan_fields`): the invariant plan's linear kernel is
    `sbgemm` (and its attention `sbattn`) where the C kernels build on this machine, else
    `mkl-tiles` (and numba attention); `linear_kernel` (or $SAMEBITS_LINEAR_KERNEL) forces
    one. `head_dim` and `group` (query heads per KV head) are the model's: the C attention is
    chosen only for shapes it supports. CUDA (`samebits.kernels.triton.plan`): `dtype`
    default "bfloat16"; `num_threads` and `linear_kernel` do not apply. `moe` (a
    mixture-of-experts model): the plan's ops also name the MoE router and experts' kernels
    (`samebits.kernels.moe`), so the fingerprint does. ``"replay"`` (CPU only): the GPU
    invariant plan's bits computed on the CPU (`samebits.kernels.replay.plan`).
    """
    if name not in ("invariant", "fast", "replay"):
        raise ValueError(f"kernel_plan must be 'invariant', 'fast' or 'replay', got {name!r}")
    if name == "replay":  # the GPU invariant plan's bits on a CPU (kernels/replay)
        if device != "cpu":
            raise ValueError(f"kernel_plan 'replay' runs on the CPU, not on {device!r}")
        from samebits.kernels.replay.plan import replay_plan_fields

        fields = replay_plan_fields(head_dim, group, num_threads)
        plan = KernelPlan(**_with_moe_ops(fields, name, moe))
        plan.apply_threads()
        return plan
    if device == "cuda":
        from samebits.kernels.triton.plan import cuda_plan_fields

        fields = cuda_plan_fields(name, dtype or "bfloat16", head_dim, group)
        return KernelPlan(**_with_moe_ops(fields, name, moe))
    from samebits.kernels.cpu.plan import cpu_plan_fields

    fields = cpu_plan_fields(name, num_threads, linear_kernel, head_dim, group, ATTENTION_SPAN)
    plan = KernelPlan(**_with_moe_ops(fields, name, moe))
    plan.apply_threads()
    return plan


def _with_moe_ops(fields: dict, name: str, moe: bool) -> dict:
    if not moe:
        return fields
    from samebits.kernels.moe import FAST_MOE_OPS, INVARIANT_MOE_OPS

    extra = FAST_MOE_OPS if name == "fast" else INVARIANT_MOE_OPS
    if name == "replay":
        from samebits.kernels.replay.plan import REPLAY_MOE_OPS

        extra = REPLAY_MOE_OPS
    if name != "fast" and fields.get("device") == "cuda":  # the GPU's grouped expert launch
        from samebits.kernels.triton.moe_grouped import GROUPED_DESCRIPTION
        from samebits.kernels.triton.moe_router import ROUTER_DESCRIPTION

        extra = dict(extra, moe_router=ROUTER_DESCRIPTION, moe_experts=GROUPED_DESCRIPTION)
    return dict(fields, ops={**fields["ops"], **extra})
