"""The CUDA plan choice: the `KernelPlan` fields of the GPU plans (`invariant`: the Triton
kernels; `fast`: stock torch, cuBLAS and SDPA, the negative control), from static facts only.
`samebits.kernels.plan.build_plan` makes the `KernelPlan`."""

from __future__ import annotations

from samebits.kernels.triton.describe import describe

FAST_CUDA_OPS = {
    "embedding": "torch.index_select",
    "linear": "torch.nn.functional.linear (cuBLAS, shape-dependent algorithm)",
    "rms_norm": "torch pow/mean/rsqrt (float32)",
    "rope": "torch elementwise (float32)",
    "silu_mul": "torch.nn.functional.silu (bfloat16)",
    "gelu_mul": "torch.nn.functional.gelu, tanh (bfloat16)",
    "attention": "torch scaled_dot_product_attention per request",
    "final_norm_logits": "torch ops on sampled rows, cuBLAS LM head",
}


def cuda_plan_fields(name: str, dtype: str, head_dim: int, group: int) -> dict:
    """The `KernelPlan` fields of GPU plan `name` for a model with this head_dim / GQA group."""
    ops = dict(FAST_CUDA_OPS) if name == "fast" else describe()
    linear, attention = ("cublas", "sdpa") if name == "fast" else ("triton-split", "triton-paged")
    return {
        "name": name, "num_threads": 0, "linear_tiles": (), "attention_key_tile": 0, "ops": ops,
        "linear_kernel": linear, "attention_kernel": attention, "torch_threads": 0,
        "device": "cuda", "dtype": dtype, "head_dim": head_dim, "group": group,
    }  # fmt: skip
