"""The CPU plan choice: which kernel runs each op of the `invariant` and `fast` plans on the
CPU, and the thread counts, from static facts only (plan name, threads, model shapes, whether
the native C kernels build). `samebits.kernels.plan.build_plan` makes the `KernelPlan`.
"""

from __future__ import annotations

import os
import warnings

import torch

LINEAR_TILES = (64, 32, 16, 8, 4)
KEY_TILE = 32
# The split plan of the row-parallel weights (o, down; DESIGN.md §2b): K in this many fixed
# ranges, each a fresh float32 chain, summed in range order. 8 is divisible by every
# tensor-parallel degree samebits.parallel accepts (1, 2, 4, 8), so a rank owning ranges
# r*8/t .. (r+1)*8/t - 1 computes exactly the TP = 1 partials. Other roles: one chain.
ROW_PARALLEL_ROLES = ("o", "down")
ROW_PARALLEL_SPLITS = 8
# Each range is a whole number of 32-k blocks, so GGUF Q4_1 / Q8_0 weights keep their stored
# form in every range (sbgemm.c reads blocks of 32 k): the plan never depends on the format.
SPLIT_RANGE_QUANTUM = 32


def linear_splits(k: int, role: str) -> int:
    """The K ranges of a weight with `k` inputs and `role`: ROW_PARALLEL_SPLITS for o / down
    when k is a multiple of ROW_PARALLEL_SPLITS * SPLIT_RANGE_QUANTUM (every Llama / Qwen /
    Mistral size from 1B up), else 1 (such a model cannot be sharded: samebits.parallel
    refuses it)."""
    if role in ROW_PARALLEL_ROLES and k % (ROW_PARALLEL_SPLITS * SPLIT_RANGE_QUANTUM) == 0:
        return ROW_PARALLEL_SPLITS
    return 1


def attention_description(kernel: str, span: int) -> str:
    """The plan's line for the attention op: kernel "sbattn" or "numba" with key span `span`."""
    spans = (
        f"spans of {span} keys at absolute positions, each an online softmax over key tiles "
        f"of {KEY_TILE} in order from a fresh state, merged in span order by one formula"
    )
    if kernel == "sbattn":
        return (
            f"samebits C paged attention (sbattn.c): {spans}; 16-lane dot products with a "
            "fixed tree, own vectorised exp; each (token, KV head) item on one thread, or its "
            "spans on several when items are few (same bits)"
        )
    return (
        f"numba paged attention (float64): {spans}; one thread per (token, head), or per "
        "(token, head, span) when items are few (same bits)"
    )


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
    "gelu_mul": "numba row kernel (Gemma's GeGLU), float64 tanh form, scalar libm tanh",
    "attention": "",
    "final_norm_logits": "numba RMSNorm + the linear kernel on sampled rows only",
    "linear_split": f"o, down: K in {ROW_PARALLEL_SPLITS} fixed ranges (where K is a multiple "
    f"of {ROW_PARALLEL_SPLITS * SPLIT_RANGE_QUANTUM}), each a fresh float32 chain, summed in "
    "range order; other weights one chain",
}
NATIVE_ROW_OPS = {
    "rms_norm": "samebits C row kernel (sbrow.c): float64 sum of squares in 16 fixed lanes + "
    "a fixed halving tree (fused residual add), one thread per row",
    "silu_mul": "samebits C row kernel (sbrow.c): sb_exp (same bits SIMD/scalar), "
    "g/(1+e) or g*e/(1+e) with e = exp(-|g|), one thread per row",
    "gelu_mul": "samebits C row kernel (sbrow.c, Gemma's GeGLU): g*sigmoid(z), "
    "z = g*(K1 + K2*g*g), as silu_mul's formula with e = sb_exp(-|z|), one thread per row",
    "final_norm_logits": "C RMSNorm (sbrow.c) + the linear kernel on sampled rows only",
}
FAST_OPS = {
    "embedding": "torch.index_select",
    "linear": "torch.nn.functional.linear on all rows (MKL/oneDNN, shape-dependent)",
    "rms_norm": "torch pow/mean/rsqrt",
    "rope": "torch elementwise",
    "silu_mul": "torch.nn.functional.silu",
    "gelu_mul": "torch.nn.functional.gelu (tanh)",
    "attention": "torch scaled_dot_product_attention per request",
    "final_norm_logits": "torch ops on sampled rows",
}


def cpu_plan_fields(
    name: str, num_threads: int | None, linear_kernel: str | None, head_dim: int, group: int,
    span: int,
) -> dict:  # fmt: skip
    """The `KernelPlan` fields of CPU plan `name` ("invariant" or "fast"); applies the thread
    count to torch and numba (process-wide). `span`: the attention span (keys per span).

    The invariant plan's linear kernel is `sbgemm` (and its attention `sbattn`) where the C
    kernels build on this machine, else `mkl-tiles` (and numba attention); `linear_kernel`
    (or $SAMEBITS_LINEAR_KERNEL) forces one. `head_dim` and `group` (query heads per KV head)
    are the model's: the C attention is chosen only for shapes it supports.
    """
    threads = num_threads or min(os.cpu_count() or 1, 8)
    torch.set_num_threads(threads)
    from samebits.kernels.cpu.numba_env import numba

    numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
    common = {"name": name, "num_threads": threads, "linear_tiles": LINEAR_TILES,
              "attention_key_tile": KEY_TILE, "head_dim": head_dim, "group": group,
              "attention_span": span}  # fmt: skip
    if name == "fast":
        return dict(common, ops=dict(FAST_OPS), linear_kernel="torch")
    kernel, fallback = _choose_linear_kernel(
        linear_kernel or os.environ.get("SAMEBITS_LINEAR_KERNEL")
    )
    attention = "sbattn" if kernel == "sbgemm" and _sbattn_fits(head_dim, group, span) else "numba"
    ops = dict(
        INVARIANT_OPS, linear=LINEAR_KERNELS[kernel],
        attention=attention_description(attention, span),
    )  # fmt: skip
    if kernel == "sbgemm":
        ops.update(NATIVE_ROW_OPS)
    torch_threads = 1 if kernel == "sbgemm" and attention == "sbattn" else 0
    return dict(
        common, ops=ops, linear_kernel=kernel, attention_kernel=attention,
        torch_threads=torch_threads, native_fallback=fallback,
    )  # fmt: skip


def _sbattn_fits(head_dim: int, group: int, span: int) -> bool:
    from samebits.kernels.cpu import sbattn

    return sbattn.supports(head_dim, group, KEY_TILE, span)


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
        stacklevel=4,
    )
    return "mkl-tiles", error
