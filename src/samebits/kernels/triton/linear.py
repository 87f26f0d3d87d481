"""Split-plan linear on the GPU (DESIGN §2b): ``y = x @ weight.T (+ bias)``.

Invariant: row m of the output depends only on row m of x, the weight, the bias and the
:class:`SplitPlan` (a function of the weight's shape and role). The :class:`Launch`, chosen from
M, only schedules that fixed reduction, so a row's bits do not depend on the batch it sits in.
"""

from __future__ import annotations

import torch
import triton

from samebits.kernels.triton._linear_kernels import (
    linear_partials_kernel,
    linear_ranges_kernel,
    linear_tma_kernel,
    ordered_sum_kernel,
)
from samebits.kernels.triton.launches import SPLIT_GRID, TMA, Launch, choose_launch
from samebits.kernels.triton.splitplan import SplitPlan, split_plan

__all__ = ["Launch", "SplitPlan", "TritonLinear", "choose_launch", "linear", "split_plan"]

ORDERED_SUM_BLOCK = 1024
ORDERED_SUM_WARPS = 4


def _check(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, plan: SplitPlan):
    if x.dim() != 2 or x.shape[0] < 1 or x.shape[1] != plan.k:
        raise ValueError(f"x must be [M>=1, {plan.k}], got {tuple(x.shape)}")
    if tuple(weight.shape) != (plan.n, plan.k):
        raise ValueError(f"weight must be [{plan.n}, {plan.k}], got {tuple(weight.shape)}")
    if x.dtype != weight.dtype:
        raise TypeError(f"x dtype {x.dtype} != weight dtype {weight.dtype}")
    if not (x.is_contiguous() and weight.is_contiguous()):
        raise ValueError("linear expects contiguous x and weight (row-major)")
    if bias is not None and (tuple(bias.shape) != (plan.n,) or not bias.is_contiguous()):
        raise ValueError(f"bias must be a contiguous [{plan.n}] vector")


def _run_ranges(x, weight, bias, y, plan: SplitPlan, launch: Launch) -> None:
    m = x.shape[0]
    grid = (triton.cdiv(m, launch.block_m), triton.cdiv(plan.n, launch.block_n))
    linear_ranges_kernel[grid](
        x, weight, bias if bias is not None else y, y, m, plan.n, plan.k,
        RANGE_K=plan.range_k, SPLITS=plan.splits, HAS_BIAS=bias is not None,
        BLOCK_M=launch.block_m, BLOCK_N=launch.block_n, BLOCK_K=plan.block_k,
        num_warps=launch.num_warps, num_stages=launch.num_stages,
    )  # fmt: skip


def split_partials(x, weight, plan: SplitPlan, launch: Launch) -> torch.Tensor:
    """The split-K grid's first kernel: chain c_s of every range into ``[S, M, N]`` fp32."""
    m = x.shape[0]
    partials = torch.empty((plan.splits, m, plan.n), device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(m, launch.block_m), triton.cdiv(plan.n, launch.block_n), plan.splits)
    linear_partials_kernel[grid](
        x, weight, partials, m, plan.n, plan.k, RANGE_K=plan.range_k,
        BLOCK_M=launch.block_m, BLOCK_N=launch.block_n, BLOCK_K=plan.block_k,
        num_warps=launch.num_warps, num_stages=launch.num_stages,
    )  # fmt: skip
    return partials


def _run_split_grid(x, weight, bias, y, plan: SplitPlan, launch: Launch) -> None:
    ordered_sum(split_partials(x, weight, plan, launch), bias, y)


def ordered_sum(partials: torch.Tensor, bias: torch.Tensor | None, y: torch.Tensor) -> None:
    """The split-K grid's second kernel: ``y = ((c_0 + c_1) + ...) + bias`` cast to y's dtype."""
    splits, m, n = partials.shape
    ordered_sum_kernel[(triton.cdiv(m * n, ORDERED_SUM_BLOCK),)](
        partials, bias if bias is not None else y, y, m, n, SPLITS=splits,
        HAS_BIAS=bias is not None, BLOCK=ORDERED_SUM_BLOCK, num_warps=ORDERED_SUM_WARPS,
    )  # fmt: skip


def tma_grid(n: int, m: int, launch: Launch) -> tuple[int, int, int]:
    """(GROUP_N, m-tiles, n-groups): the TMA launch's grid, whose first axis is also its
    GROUP_N constexpr: groups of ``launch.group_n`` weight tiles, fewer when N has fewer tiles
    (programs past N store nothing)."""
    tiles_n = triton.cdiv(n, launch.block_n)
    group = min(launch.group_n, tiles_n)
    return group, triton.cdiv(m, launch.block_m), triton.cdiv(tiles_n, group)


def _run_tma(x, weight, bias, y, plan: SplitPlan, launch: Launch) -> None:
    from triton.tools.tensor_descriptor import TensorDescriptor

    m = x.shape[0]
    grid = tma_grid(plan.n, m, launch)
    x_desc = TensorDescriptor.from_tensor(x, [launch.block_m, plan.block_k])
    w_desc = TensorDescriptor.from_tensor(weight, [launch.block_n, plan.block_k])
    linear_tma_kernel[grid](
        x_desc, w_desc, bias if bias is not None else y, y, m, plan.n, plan.k,
        RANGE_K=plan.range_k, SPLITS=plan.splits, HAS_BIAS=bias is not None,
        BLOCK_M=launch.block_m, BLOCK_N=launch.block_n, BLOCK_K=plan.block_k, GROUP_N=grid[0],
        num_warps=launch.num_warps, num_stages=launch.num_stages,
    )  # fmt: skip


_TMA_CAPABLE: dict[int, bool] = {}


def tma_ready(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether TMA descriptors can read x and weight: a CUDA device of compute capability >= 9
    and 16-byte aligned bases and row strides. A pure function of static facts (device, K,
    dtype) and allocation alignment; either answer gives the same bits."""
    if not x.is_cuda:
        return False
    dev = x.device.index if x.device.index is not None else torch.cuda.current_device()
    if dev not in _TMA_CAPABLE:
        _TMA_CAPABLE[dev] = torch.cuda.get_device_capability(dev) >= (9, 0)
    row_bytes = x.shape[1] * x.element_size()
    aligned = x.data_ptr() % 16 == 0 and weight.data_ptr() % 16 == 0 and row_bytes % 16 == 0
    return _TMA_CAPABLE[dev] and aligned


def launch_for(x: torch.Tensor, weight: torch.Tensor, plan: SplitPlan) -> Launch:
    """The launch M = ``x.shape[0]`` picks, with TMA where `tma_ready` allows it."""
    return choose_launch(plan, x.shape[0], tma_ready(x, weight))


_RUNNERS = {SPLIT_GRID: _run_split_grid, TMA: _run_tma}


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    plan: SplitPlan,
    out_dtype: torch.dtype,
    launch: Launch | None = None,
) -> torch.Tensor:
    """``x [M, K] @ weight[N, K].T + bias`` as ``out_dtype``, reduced exactly as ``plan`` says.
    The launch (chosen from M and :func:`tma_ready` unless given) never changes the bits. M = 0 (a step that samples no row) gives an empty [0, N] result without a launch."""
    if x.dim() == 2 and x.shape[0] == 0 and x.shape[1] == plan.k:
        return torch.empty((0, plan.n), device=x.device, dtype=out_dtype)
    _check(x, weight, bias, plan)
    launch = launch or launch_for(x, weight, plan)
    y = torch.empty((x.shape[0], plan.n), device=x.device, dtype=out_dtype)
    _RUNNERS.get(launch.kind, _run_ranges)(x, weight, bias, y, plan, launch)
    return y


class TritonLinear:
    """One weight as the engine holds it: its device tensors, its plan and its output dtype."""

    def __init__(
        self,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        role: str,
        out_dtype: torch.dtype,
    ) -> None:
        n, k = weight.shape
        self.weight = weight.contiguous()
        self.bias = None if bias is None else bias.contiguous()
        self.role = role
        self.out_dtype = out_dtype
        self.shape: tuple[int, int] = (n, k)
        self.plan: SplitPlan = split_plan(n, k, role)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """``x [M, K] -> [M, N]`` in ``out_dtype``; the launch follows M, the bits do not."""
        return linear(x, self.weight, self.bias, self.plan, self.out_dtype)

    def grid_partials(self, x: torch.Tensor) -> torch.Tensor | None:
        """The partials ``[S, M, N]`` of the split-K grid when that is M's launch (the caller
        then owes their ordered sum), else None (the launch sums the ranges itself)."""
        if x.dim() != 2 or x.shape[0] == 0:
            return None
        launch = launch_for(x, self.weight, self.plan)
        if launch.kind != SPLIT_GRID:
            return None
        _check(x, self.weight, self.bias, self.plan)
        return split_partials(x, self.weight, self.plan, launch)

    def __repr__(self) -> str:
        p = self.plan
        return f"TritonLinear({self.role}, n={p.n}, k={p.k}, S={p.splits}, BK={p.block_k})"
