"""The grouped MoE expert kernel (`kernels/triton/_moe_kernels.py`) on Triton's interpreter
(float32 operands: the interpreter's bf16 tl.dot is not the GPU's): every row bitwise equal
to the per-expert split-plan linear launch (`TritonLinear`, the launch its expert's row count
picks) for skewed routings (every token on one expert, empty experts, one token), with a
split plan (down, S = 4) and without (gate_up, S = 1), at every grouped tile config; the
tile table's bounds; the whole expert path (gate_up, silu_mul, down) against
`kernels.moe.expert_outputs`; the combine kernel against `kernels.moe.combine`."""

from __future__ import annotations

import pytest
import torch
from triton_bits import differing_rows, same_bits

from samebits.kernels import moe as torch_moe
from samebits.kernels.moe import expert_outputs
from samebits.kernels.triton import rows as triton_rows
from samebits.kernels.triton.linear import TritonLinear
from samebits.kernels.triton.moe_grouped import (
    GROUPED_TABLE,
    GroupedExperts,
    GroupedLaunch,
    choose_grouped,
    combine,
    grouped_linear,
    grouped_outputs,
    max_tiles,
    tile_table,
    tile_table_torch,
)

E, H, INTER, TOP_K = 6, 64, 512, 2  # down [64 x 512]: S = 4 ranges of 128 (BK 64: 2 steps)
LAUNCHES = [GroupedLaunch(bm, bn, w, s) for _, bm, bn, w, s in GROUPED_TABLE]


def _linears(role: str, n: int, k: int, seed: int) -> list[TritonLinear]:
    gen = torch.Generator().manual_seed(seed)
    return [TritonLinear(torch.randn(n, k, generator=gen) / k**0.5, None, role, torch.float32)
            for _ in range(E)]  # fmt: skip


def _routing(kind: str, n: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(n)
    if kind == "one_expert":  # every token's rank 0 on expert 3 (rank 1 on expert 1)
        return torch.tensor([[3, 1]] * n)
    if kind == "skewed":  # experts 0 and 5 get nothing, expert 2 most tokens
        return torch.stack([torch.full((n,), 2), torch.randint(1, 5, (n,), generator=gen)], 1)
    return torch.stack([torch.randperm(E, generator=gen)[:TOP_K] for _ in range(n)])


def _reference(x, ids, linears) -> torch.Tensor:
    """Row (t, r): expert ids[t, r]'s linear on x[t], by the per-expert launch of its count."""
    out = torch.empty((ids.numel(), linears[0].plan.n))
    flat = ids.reshape(-1)
    for e in range(E):
        pairs = (flat == e).nonzero().flatten()
        if pairs.numel():
            out[pairs] = linears[e](x[torch.div(pairs, TOP_K, rounding_mode="floor")])
    return out


@pytest.mark.parametrize("kind, n", [("one_expert", 19), ("skewed", 13), ("random", 1),
                                     ("random", 9)])  # fmt: skip
@pytest.mark.parametrize("role, n_out, k", [("down", H, INTER), ("gate_up", 2 * INTER, H)])
def test_grouped_rows_equal_the_per_expert_linear(kind, n, role, n_out, k):
    linears = _linears(role, n_out, k, seed=1)
    w, plan = torch.stack([lin.weight for lin in linears]), linears[0].plan
    assert plan.splits == (4 if role == "down" else 1)
    x = torch.randn(n, k, generator=torch.Generator().manual_seed(2))
    ids = _routing(kind, n)
    ref = _reference(x, ids, linears)
    for launch in LAUNCHES:
        table = tile_table(ids, E, launch.block_m)
        y = grouped_linear(x, w, plan, table, table.tokens, table.order,
                           torch.float32, launch)  # fmt: skip
        assert same_bits(y, ref), (launch, differing_rows(y, ref))


TABLE_CASES = [("one_expert", 40), ("skewed", 23), ("random", 1), ("random", 31)]


@pytest.mark.parametrize("build", [tile_table, tile_table_torch])
def test_tile_table_covers_each_row_once_within_its_expert(build):
    for kind, n in TABLE_CASES:
        ids = _routing(kind, n)
        for bm in (16, 64):
            table = build(ids, E, bm)
            assert table.lo.shape[0] == max_tiles(ids.numel(), E, bm)
            # the sort-free order is the stable sort by expert (integers: exact equality)
            order = table.order.long()
            assert torch.equal(order, torch.argsort(ids.reshape(-1), stable=True))
            assert torch.equal(table.tokens.long(), order // TOP_K)
            flat = ids.reshape(-1)[order]
            seen = torch.zeros(ids.numel(), dtype=torch.int64)
            for e, lo, hi in zip(table.expert.tolist(), table.lo.tolist(), table.hi.tolist(),
                                 strict=True):  # fmt: skip
                if lo >= hi:
                    assert lo == hi == 0  # a tile no program needs
                    continue
                assert hi - lo <= bm and bool((flat[lo:hi] == e).all())
                seen[lo:hi] += 1
            assert seen.tolist() == [1] * ids.numel()


def test_tile_table_kernel_gives_the_torch_table():
    """The one-launch table and the torch ops' table are the same integers, also past the
    kernel's 64-pair steps and for experts that are never routed to."""
    gen = torch.Generator().manual_seed(0)
    for n, e, k, bm in [(1, 128, 8, 16), (64, 128, 8, 16), (97, 8, 2, 16), (300, 6, 2, 64)]:
        ids = torch.stack([torch.randperm(e, generator=gen)[:k] for _ in range(n)])
        ids[: n // 2, 0] = 1  # skew: expert 1 takes half the tokens
        a, b = tile_table(ids, e, bm), tile_table_torch(ids, e, bm)
        for field in ("order", "tokens", "expert", "lo", "hi"):
            assert torch.equal(getattr(a, field), getattr(b, field)), (n, e, field)


def test_max_tiles_bounds_the_worst_routing():
    for rows in (1, 2, 7, 16, 17, 64, 513):
        for bm in (16, 64):
            worst = min(E, rows)  # one row on each of E - 1 experts, the rest on one
            counts = [1] * (worst - 1) + [rows - (worst - 1)]
            assert sum(-(-c // bm) for c in counts) <= max_tiles(rows, E, bm)


def test_choose_grouped_follows_rows_only():
    assert choose_grouped(1) == choose_grouped(GROUPED_TABLE[0][0])
    assert choose_grouped(GROUPED_TABLE[0][0] + 1).block_n == GROUPED_TABLE[1][2]
    with pytest.raises(ValueError, match="at least one row"):
        choose_grouped(0)


def test_grouped_expert_outputs_equal_the_per_expert_path():
    gate_ups = _linears("gate_up", 2 * INTER, H, seed=3)
    downs = _linears("down", H, INTER, seed=4)
    experts = list(zip(gate_ups, downs, strict=True))
    for kind, n in [("one_expert", 17), ("skewed", 5), ("random", 1)]:
        x = torch.randn(n, H, generator=torch.Generator().manual_seed(n))
        ids = _routing(kind, n)
        ref = expert_outputs(x, ids, experts, triton_rows.silu_mul)
        got = grouped_outputs(x, ids, GroupedExperts(experts), triton_rows.silu_mul)
        assert same_bits(got, ref), (kind, differing_rows(got.reshape(-1, H), ref.reshape(-1, H)))


def test_grouped_experts_share_the_stacked_weights():
    gate_ups, downs = _linears("gate_up", 2 * INTER, H, 5), _linears("down", H, INTER, 6)
    before = [d.weight.clone() for d in downs]
    grouped = GroupedExperts(list(zip(gate_ups, downs, strict=True)))
    assert grouped.down.shape == (E, H, INTER)
    for e, d in enumerate(downs):
        assert d.weight.data_ptr() == grouped.down[e].data_ptr()
        assert same_bits(d.weight, before[e])
    assert len(grouped) == E and grouped[2] == (gate_ups[2], downs[2])


def test_grouped_experts_reject_mixed_shapes():
    gate_ups = _linears("gate_up", 2 * INTER, H, 7)
    odd = TritonLinear(torch.randn(2 * INTER, 2 * H), None, "gate_up", torch.float32)
    with pytest.raises(ValueError, match="differ in shape"):
        GroupedExperts([(g, g) for g in gate_ups[:-1]] + [(odd, odd)])


@pytest.mark.parametrize("n, k, hidden", [(5, 8, 100), (3, 2, 1500), (1, 1, 64), (0, 8, 64)])
def test_combine_kernel_has_the_bits_of_the_rank_order_combine(n, k, hidden):
    gen = torch.Generator().manual_seed(hidden)
    outputs = torch.randn(n, k, hidden, generator=gen) * 100
    weights = torch.rand(n, k, generator=gen)
    got = combine(outputs, weights, torch.float32)
    assert same_bits(got, torch_moe.combine(outputs, weights, torch.float32))
    if n and k > 2:  # the order matters here: reversed ranks give other bits (k = 2: same)
        rev = torch_moe.combine(outputs.flip(1), weights.flip(1), torch.float32)
        assert not same_bits(got, rev)


def test_combine_rejects_bad_weights():
    with pytest.raises(ValueError, match="float32"):
        combine(torch.zeros(2, 3, 8), torch.zeros(2, 3, dtype=torch.float64), torch.float32)


def test_gpu_plan_fingerprint_names_the_grouped_launch():
    from samebits.kernels.plan import build_plan
    from samebits.kernels.triton.moe_grouped import GROUPED_DESCRIPTION

    gpu = build_plan("invariant", device="cuda", moe=True).ops
    assert gpu["moe_experts"] == GROUPED_DESCRIPTION and "moe_router" in gpu
    assert "grouped" not in build_plan("invariant", moe=True).ops["moe_experts"]
    assert "index_add_" in build_plan("fast", device="cuda", moe=True).ops["moe_experts"]


def test_grouped_outputs_of_an_empty_batch():
    gate_ups, downs = _linears("gate_up", 2 * INTER, H, 8), _linears("down", H, INTER, 9)
    grouped = GroupedExperts(list(zip(gate_ups, downs, strict=True)))
    ids = torch.zeros((0, TOP_K), dtype=torch.int64)
    out = grouped_outputs(torch.zeros((0, H)), ids, grouped, triton_rows.silu_mul)
    assert out.shape == (0, TOP_K, H)
