"""The KernelPlan: one kernel and one static configuration per op, chosen once at start-up.

Invariant: a plan is built from static facts only (plan name, thread count, model shapes) and
is never consulted with runtime state (batch size, chunk length, cache placement).
"""

from __future__ import annotations

import os
import warnings
from dataclasses import asdict, dataclass, field

import torch

from samebits.kernels.backend import Ops, make_ops

LINEAR_TILES = (64, 32, 16, 8, 4)
KEY_TILE = 32

ATTENTION_KERNELS = {
    "sbattn": f"samebits C paged attention (sbattn.c): key tiles of {KEY_TILE} aligned to "
    "absolute positions, online softmax in tile order, 16-lane dot products with a fixed "
    "tree, own vectorised exp; each (token, KV head) item on one thread",
    "numba": f"numba paged attention, key tiles of {KEY_TILE} aligned to absolute positions, "
    "online softmax in tile order (float64), one thread per (token, head)",
}
LINEAR_KERNELS = {
    "sbgemm": "samebits C GEMM (sbgemm.c): per output, K fused multiply-adds in k order, one "
    "SIMD lane; invariant by construction (rows, position, vector width, threads); GGUF "
    "Q4_1/Q8_0 blocks and bf16/f16 weights read as stored and expanded with the loader's "
    "float32 ops (same bits)",
    "mkl-tiles": f"torch.mm (MKL) on fixed row tiles {LINEAR_TILES}, rows padded to a multiple "
    f"of {LINEAR_TILES[-1]}; qualified at start-up",
}
INVARIANT_OPS = {
    "embedding": "torch.index_select (data movement, no arithmetic)",
    "linear": "",
    "rms_norm": "numba row kernel, float64 sum of squares in index order (fused residual add)",
    "rope": "numba, rotate-half with cos/sin tables per absolute position",
    "silu_mul": "numba row kernel, scalar libm exp",
    "attention": "",
    "final_norm_logits": "numba RMSNorm + the linear kernel on sampled rows only",
}
NATIVE_ROW_OPS = {
    "rms_norm": "samebits C row kernel (sbrow.c): float64 sum of squares in 16 fixed lanes + "
    "a fixed halving tree (fused residual add), one thread per row",
    "silu_mul": "samebits C row kernel (sbrow.c): sb_exp (same bits SIMD/scalar), "
    "g/(1+e) or g*e/(1+e) with e = exp(-|g|), one thread per row",
    "final_norm_logits": "C RMSNorm (sbrow.c) + the linear kernel on sampled rows only",
}
FAST_OPS = {
    "embedding": "torch.index_select",
    "linear": "torch.nn.functional.linear on all rows (MKL/oneDNN, shape-dependent)",
    "rms_norm": "torch pow/mean/rsqrt",
    "rope": "torch elementwise",
    "silu_mul": "torch.nn.functional.silu",
    "attention": "torch scaled_dot_product_attention per request",
    "final_norm_logits": "torch ops on sampled rows",
}


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
    # why the native kernels are not used although the plan would use them (the build failed);
    # shown by describe(), not part of to_dict() (the fingerprint has linear_kernel)
    native_fallback: str = field(default="", compare=False)

    def intra_op_threads(self) -> int:
        """Threads torch may use inside a forward pass. With the native kernels torch only
        moves data, and one thread keeps its OpenMP workers from spinning on the cores the
        kernels' own pool runs on."""
        return self.torch_threads or self.num_threads

    def apply_threads(self) -> None:
        """Set torch's intra-op thread count for a CPU plan (process-wide; cheap if unchanged)."""
        if self.device == "cpu" and torch.get_num_threads() != self.intra_op_threads():
            torch.set_num_threads(self.intra_op_threads())

    def make_ops(self) -> Ops:
        """The registered op set for (device, name) (`samebits.kernels.backend`)."""
        return make_ops(self)

    def to_dict(self) -> dict:
        d = asdict(self)
        del d["native_fallback"]
        return d

    def describe(self) -> str:
        threads = f"threads={self.num_threads}"
        if self.intra_op_threads() != self.num_threads:
            threads += f", torch intra-op threads={self.intra_op_threads()}"
        if self.device != "cpu":
            threads = f"device={self.device}, dtype={self.dtype}"
        lines = [f"kernel plan: {self.name} ({threads})"]
        lines += [f"  {op:<18} {kernel}" for op, kernel in self.ops.items()]
        if self.native_fallback:
            lines.append(f"  NOTE: the native C kernels failed to build, so the plan runs "
                         f"mkl-tiles + numba: {self.native_fallback}")  # fmt: skip
        return "\n".join(lines)


def build_plan(
    name: str = "invariant", num_threads: int | None = None, linear_kernel: str | None = None,
    head_dim: int = 64, group: int = 1, device: str = "cpu", dtype: str | None = None,
) -> KernelPlan:  # fmt: skip
    """Build the plan and apply its thread counts to torch and numba (process-wide; the model
    re-applies torch's at every forward, see `KernelPlan.apply_threads`).

    The invariant plan's linear kernel is `sbgemm` (and its attention `sbattn`) where the C
    kernels build on this machine, else `mkl-tiles` (and numba attention); `linear_kernel`
    (or $SAMEBITS_LINEAR_KERNEL) forces one. `head_dim` and `group` (query heads per KV head)
    are the model's: the C attention is chosen only for shapes it supports.
    """
    if name not in ("invariant", "fast"):
        raise ValueError(f"kernel_plan must be 'invariant' or 'fast', got {name!r}")
    if device == "cuda":
        from samebits.kernels.triton.backend import build_cuda_plan

        return build_cuda_plan(name, dtype or "bfloat16", head_dim, group)
    threads = num_threads or min(os.cpu_count() or 1, 8)
    torch.set_num_threads(threads)
    from samebits.kernels.cpu.numba_env import numba

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    shape = {"head_dim": head_dim, "group": group}
    if name == "fast":
        return KernelPlan(name, threads, LINEAR_TILES, KEY_TILE, dict(FAST_OPS), "torch", **shape)
    kernel, fallback = _choose_linear_kernel(
        linear_kernel or os.environ.get("SAMEBITS_LINEAR_KERNEL")
    )
    attention = "sbattn" if kernel == "sbgemm" and _sbattn_fits(head_dim, group) else "numba"
    ops = dict(INVARIANT_OPS, linear=LINEAR_KERNELS[kernel], attention=ATTENTION_KERNELS[attention])
    if kernel == "sbgemm":
        ops.update(NATIVE_ROW_OPS)
    torch_threads = 1 if kernel == "sbgemm" and attention == "sbattn" else 0
    plan = KernelPlan(
        name, threads, LINEAR_TILES, KEY_TILE, ops, kernel, attention, torch_threads, **shape,
        native_fallback=fallback,
    )  # fmt: skip
    plan.apply_threads()
    return plan


def _sbattn_fits(head_dim: int, group: int) -> bool:
    from samebits.kernels.cpu import sbattn

    return sbattn.supports(head_dim, group, KEY_TILE)


def _choose_linear_kernel(requested: str | None) -> tuple[str, str]:
    """(kernel, reason): sbgemm where the C kernels build, else mkl-tiles with the build's
    error as the reason, announced with a warning (a requested mkl-tiles has no reason)."""
    from samebits.kernels.cpu import native

    if requested not in (None, "", *LINEAR_KERNELS):
        raise ValueError(f"linear kernel must be one of {tuple(LINEAR_KERNELS)}, got {requested!r}")
    if requested == "mkl-tiles":
        return requested, ""
    error = native.build_error()
    if error is None:
        return "sbgemm", ""
    if requested == "sbgemm":
        native.library()  # raises BuildError with the compiler's reason
    warnings.warn(
        f"samebits: the native C kernels are unavailable ({error}); the invariant plan falls "
        "back to MKL tiles + numba (slower, same invariance). Fix the build, or set "
        "SAMEBITS_LINEAR_KERNEL=mkl-tiles to choose this plan deliberately.",
        RuntimeWarning,
        stacklevel=3,
    )
    return "mkl-tiles", error
