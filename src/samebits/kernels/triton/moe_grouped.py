"""The grouped MoE expert launch on the GPU: every expert of a layer in one kernel launch per
linear (`_moe_kernels.moe_grouped_kernel`), with no host sync (CUDA-graph capturable).

Invariant: row (t, r) of the experts' output is, bit for bit, expert ``ids[t, r]``'s
``down(silu_mul(gate_up(x[t])))`` by that expert's own split-plan linears
(`samebits.kernels.triton.linear`), whatever the number of tokens routed to each expert and
whatever the batch: the kernel computes the plan's reduction of one row from that row alone,
and the tile table (made on the device from the routing) only says which program computes
which row. The launch's tiles come from the number of rows P = n * top_k (a static fact of
the step, never a per-expert count) and none of them changes the bits. Evidence class: test
(`tests/kernels/test_moe_grouped.py`, interpreter; `tests/gpu/test_gpu_moe.py`, H200).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
import triton

from samebits.kernels.interface import Expert
from samebits.kernels.triton._moe_kernels import moe_combine_kernel, moe_grouped_kernel
from samebits.kernels.triton._moe_table_kernel import moe_tile_table_kernel
from samebits.kernels.triton.linear import TritonLinear
from samebits.kernels.triton.splitplan import SplitPlan

# (max rows P, block_m, block_n, num_warps, num_stages): the first row whose max P >= P.
# Decode-sized steps (few rows per expert) take 16-row tiles and narrow n-tiles for enough
# programs; larger steps wider tiles. Any row gives the same bits (the launch is not in the
# numerics: `_moe_kernels` module docstring).
GROUPED_TABLE: tuple[tuple[int, int, int, int, int], ...] = (
    (128, 16, 32, 4, 4),
    (2048, 16, 64, 4, 4),
    (1 << 62, 64, 128, 4, 3),
)
GROUPED_DESCRIPTION = (
    "triton grouped expert linear (one launch per gate_up / down over all experts): (token, "
    "rank) rows sorted by expert (stable), expert -> row-range tile table on the device (no "
    "host sync), grid sized for P = tokens * top_k rows (programs past their expert's rows "
    "exit); each row the expert's split-plan chain (the linear's ranges, BK, range order); "
    f"tiles by P {GROUPED_TABLE}; outputs combined in top-k rank order in float32 (no "
    "atomics, no capacity; evidence: test)"
)


@dataclass(frozen=True)
class GroupedLaunch:
    """The tiles of one grouped launch (never in the numerics)."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int


def choose_grouped(rows: int) -> GroupedLaunch:
    """The launch for ``rows`` (token, rank) pairs from `GROUPED_TABLE`."""
    if rows < 1:
        raise ValueError(f"a grouped launch needs at least one row, got {rows}")
    _, bm, bn, warps, stages = next(row for row in GROUPED_TABLE if rows <= row[0])
    return GroupedLaunch(bm, bn, warps, stages)


def grouped_launches() -> list[GroupedLaunch]:
    """Every launch `choose_grouped` may give (one per `GROUPED_TABLE` row)."""
    return [GroupedLaunch(bm, bn, warps, stages) for _, bm, bn, warps, stages in GROUPED_TABLE]


def max_tiles(rows: int, num_experts: int, block_m: int) -> int:
    """An upper bound on ``sum_e ceil(count_e / block_m)`` over any routing of ``rows`` pairs
    to ``num_experts`` experts: at most ``min(E, rows)`` experts are non-empty, each wastes at
    most ``block_m - 1`` rows of its last tile."""
    return (rows + min(num_experts, rows) * (block_m - 1)) // block_m


@dataclass(frozen=True)
class TileTable:
    """The device tables of one routing (int32): ``order`` [P] (the pair at each sorted
    position: pairs sorted by expert, stable; a permutation), ``tokens`` [P] (its token,
    ``order // top_k``), and per tile its expert and rows ``[lo, hi)`` of the sorted order
    (``lo = hi = 0``: a tile the routing does not need)."""

    order: torch.Tensor
    tokens: torch.Tensor
    expert: torch.Tensor
    lo: torch.Tensor
    hi: torch.Tensor


# Up to this many pairs (every decode step of up to 512 sequences at top 8) the table is one
# launch of `moe_tile_table_kernel` (one program, 64 pairs per step); above, the torch ops of
# `tile_table_torch` (about thirty launches; prefill-sized P). Both give the same integers.
TABLE_KERNEL_MAX_ROWS = 4096
TABLE_BLOCK_P = 64
TABLE_BLOCK_T = 64
TABLE_WARPS = 4


def tile_table(ids: torch.Tensor, num_experts: int, block_m: int) -> TileTable:
    """The tile table of routing ``ids`` [n, k] (int64), on the device, no host sync: one
    kernel launch for decode-sized routings, else `tile_table_torch`."""
    n, k = ids.shape
    rows = n * k
    if rows > TABLE_KERNEL_MAX_ROWS:
        return tile_table_torch(ids, num_experts, block_m)
    dev, i32 = ids.device, torch.int32
    tiles = max_tiles(rows, num_experts, block_m)
    order, tokens = (
        torch.empty(rows, device=dev, dtype=i32),
        torch.empty(rows, device=dev, dtype=i32),
    )
    expert, lo, hi = (torch.empty(tiles, device=dev, dtype=i32) for _ in range(3))
    moe_tile_table_kernel[(1,)](
        ids.contiguous(), order, tokens, expert, lo, hi, rows, num_experts, tiles, TOP_K=k,
        BLOCK_M=block_m, BLOCK_P=TABLE_BLOCK_P,
        BLOCK_E=max(16, triton.next_power_of_2(num_experts)), BLOCK_T=TABLE_BLOCK_T,
        num_warps=TABLE_WARPS,
    )  # fmt: skip
    return TileTable(order, tokens, expert, lo, hi)


def tile_table_torch(ids: torch.Tensor, num_experts: int, block_m: int) -> TileTable:
    """The tile table by torch device ops, no host sync, no sort: a pair's sorted position is
    its expert's first row plus the number of earlier pairs of that expert (a prefix sum of
    the [P, E] one-hot indicator: exact integer sums), so the order is stable by
    construction."""
    n, k = ids.shape
    flat = ids.reshape(-1)
    dev, rows = flat.device, flat.numel()
    experts = torch.arange(num_experts, device=dev)
    onehot = (flat[:, None] == experts[None, :]).to(torch.int32)
    counts = onehot.sum(dim=0, dtype=torch.int64)
    bounds = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])  # [E + 1]
    earlier = (torch.cumsum(onehot, 0, dtype=torch.int32) - onehot).gather(1, flat[:, None])
    pos = bounds.index_select(0, flat) + earlier[:, 0]
    order = torch.empty_like(flat).index_copy_(0, pos, torch.arange(rows, device=dev))
    tiles = torch.div(counts + (block_m - 1), block_m, rounding_mode="floor")
    tile_end = torch.cumsum(tiles, 0)
    t = torch.arange(max_tiles(rows, num_experts, block_m), device=dev)
    e = torch.searchsorted(tile_end, t, right=True).clamp_(max=num_experts - 1)
    lo = bounds[e] + (t - (tile_end[e] - tiles[e])) * block_m
    hi = torch.minimum(lo + block_m, bounds[e + 1])
    needed = t < tile_end[-1]
    lo, hi = torch.where(needed, lo, 0), torch.where(needed, hi, 0)
    tokens = torch.div(order, k, rounding_mode="floor")
    i32 = torch.int32
    return TileTable(order.to(i32), tokens.to(i32), e.to(i32), lo.to(i32), hi.to(i32))


def grouped_linear(x: torch.Tensor, w: torch.Tensor, plan: SplitPlan, table: TileTable,
                   x_rows: torch.Tensor, y_rows: torch.Tensor, out_dtype: torch.dtype,
                   launch: GroupedLaunch) -> torch.Tensor:  # fmt: skip
    """``y[y_rows[i]] = x[x_rows[i]] @ w[e_i].T`` for the P rows i of the table (e_i: the
    expert of i's tile), each reduced as ``plan`` says; y is [P, N] in ``out_dtype``."""
    _check_grouped(x, w, plan, x_rows, y_rows)
    rows = x_rows.shape[0]
    y = torch.empty((rows, plan.n), device=x.device, dtype=out_dtype)
    grid = (table.lo.shape[0], triton.cdiv(plan.n, launch.block_n))
    moe_grouped_kernel[grid](
        x, w, y, x_rows, y_rows, table.expert, table.lo, table.hi, plan.n, plan.k,
        RANGE_K=plan.range_k, SPLITS=plan.splits, BLOCK_M=launch.block_m,
        BLOCK_N=launch.block_n, BLOCK_K=plan.block_k, num_warps=launch.num_warps,
        num_stages=launch.num_stages,
    )  # fmt: skip
    return y


def _check_grouped(x, w, plan: SplitPlan, x_rows, y_rows) -> None:
    if x.dim() != 2 or x.shape[1] != plan.k or not x.is_contiguous():
        raise ValueError(f"x must be a contiguous [rows, {plan.k}], got {tuple(x.shape)}")
    if w.dim() != 3 or tuple(w.shape[1:]) != (plan.n, plan.k) or not w.is_contiguous():
        raise ValueError(f"w must be a contiguous [E, {plan.n}, {plan.k}], got {tuple(w.shape)}")
    if x.dtype != w.dtype:
        raise TypeError(f"x dtype {x.dtype} != expert weight dtype {w.dtype}")
    if x_rows.shape != y_rows.shape or x_rows.dtype != torch.int32:
        raise ValueError("x_rows and y_rows must be int32 vectors of one length")


class GroupedExperts(Sequence[Expert]):
    """The experts of one MoE layer held for the grouped launch: each linear's weight becomes
    a view of one stacked [E, N, K] tensor (no second copy); still a sequence of (gate_up,
    down) linears, so the per-expert path runs on it unchanged."""

    def __init__(self, experts: Sequence[Expert]):
        self.experts = list(experts)
        if not self.experts:
            raise ValueError("a MoE layer needs at least one expert")
        self.gate_up = _stack([g for g, _ in self.experts], "gate_up")
        self.down = _stack([d for _, d in self.experts], "down")
        self.gate_up_plan = self.experts[0][0].plan
        self.down_plan = self.experts[0][1].plan
        self.out_dtype = self.experts[0][0].out_dtype

    def __len__(self) -> int:
        return len(self.experts)

    def __getitem__(self, e):  # type: ignore[override]
        return self.experts[e]

    def __iter__(self) -> Iterator[Expert]:
        return iter(self.experts)


def _stack(linears: list, role: str) -> torch.Tensor:
    """Stack the linears' weights into [E, N, K] and make each weight a view of it."""
    first = linears[0]
    for lin in linears:
        if not isinstance(lin, TritonLinear) or lin.bias is not None:
            raise TypeError(f"grouped experts need bias-free TritonLinear {role} weights")
        if lin.plan != first.plan or lin.weight.dtype != first.weight.dtype:
            raise ValueError(f"expert {role} weights differ in shape or dtype")
        if lin.out_dtype != first.out_dtype:
            raise ValueError(f"expert {role} linears differ in output dtype")
    stacked = torch.stack([lin.weight for lin in linears])
    for e, lin in enumerate(linears):
        lin.weight = stacked[e]
    return stacked


def grouped_outputs(x: torch.Tensor, ids: torch.Tensor, experts: GroupedExperts,
                    silu_mul) -> torch.Tensor:  # fmt: skip
    """[n, k, H]: row (t, r) is expert ids[t, r]'s output on x[t] (the per-expert path's bits,
    `samebits.kernels.moe.expert_outputs`), from two grouped launches and one silu_mul, on
    and off CUDA-graph capture alike."""
    n, k = ids.shape
    rows = n * k
    if n == 0:
        return x.new_empty((0, k, experts.down_plan.n))
    launch = choose_grouped(rows)
    table = tile_table(ids, len(experts), launch.block_m)
    sorted_rows = torch.arange(rows, device=x.device, dtype=torch.int32)
    h = grouped_linear(x.contiguous(), experts.gate_up, experts.gate_up_plan, table,
                       table.tokens, sorted_rows, experts.out_dtype, launch)  # fmt: skip
    act = silu_mul(h)
    out = grouped_linear(act, experts.down, experts.down_plan, table, sorted_rows, table.order,
                         experts.out_dtype, launch)  # fmt: skip
    return out.view(n, k, -1)


COMBINE_BLOCK_MAX = 1024
COMBINE_WARPS = 4
# no FMA contraction in the combine: `acc + o * w` rounds the product, as the torch ops do
# (and as the prover's float model states it)
COMBINE_FP_FUSION = False


def combine_block(hidden: int) -> int:
    """The column block of `moe_combine_kernel`: a function of the hidden size only."""
    return min(COMBINE_BLOCK_MAX, triton.next_power_of_2(hidden))


def combine(outputs: torch.Tensor, weights: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """``sum_r weights[:, r] * outputs[:, r]`` [n, H] in one launch: float32, rank order, no
    FMA contraction, then the cast: the bits of `samebits.kernels.moe.combine`."""
    n, k, hidden = outputs.shape
    if tuple(weights.shape) != (n, k) or weights.dtype != torch.float32:
        raise ValueError(f"weights must be float32 [{n}, {k}], got {weights.dtype} "
                         f"{tuple(weights.shape)}")  # fmt: skip
    y = torch.empty((n, hidden), device=outputs.device, dtype=out_dtype)
    if n == 0:
        return y
    block = combine_block(hidden)
    moe_combine_kernel[(n, triton.cdiv(hidden, block))](
        outputs.contiguous(), weights.contiguous(), y, hidden, TOP_K=k, BLOCK=block,
        num_warps=COMBINE_WARPS, enable_fp_fusion=COMBINE_FP_FUSION,
    )  # fmt: skip
    return y
