"""Split plans and launch choices: pure functions of static facts (and M only for launches)."""

from __future__ import annotations

import pytest

from samebits.kernels.triton.launches import (
    RANGES,
    SPLIT_GRID,
    TMA,
    choose_launch,
    pointer_kind,
    table_launches,
)
from samebits.kernels.triton.splitplan import SplitPlan, split_plan


@pytest.mark.parametrize(
    ("n", "k", "role", "splits", "block_k", "range_k"),
    [
        (4096, 4096, "o", 4, 64, 1024),
        (4096, 14336, "down", 4, 64, 3584),
        (6144, 4096, "qkv", 1, 64, 4096),
        (28672, 4096, "gate_up", 1, 64, 4096),
        (128256, 4096, "lm_head", 1, 64, 4096),
        (40, 512, "down", 4, 64, 128),
        (40, 256, "down", 2, 64, 128),  # S=4 would leave one step per range
        (40, 128, "o", 1, 64, 128),
        (40, 256, "lm_head", 1, 64, 256),
        (40, 100, "o", 1, 64, 128),
        (40, 192, "qkv", 1, 64, 192),
        (40, 48, "qkv", 1, 32, 64),
        (40, 16, "lm_head", 1, 32, 32),
        (40, 64, "down", 1, 64, 64),
        (128, 64, "qkv", 1, 32, 64),  # a role with a bias: two steps even when S = 1
        (128, 64, "gate_up", 1, 64, 64),
        (40, 32, "qkv", 1, 16, 32),
    ],
)
def test_split_table(n, k, role, splits, block_k, range_k):
    assert split_plan(n, k, role) == SplitPlan(n, k, splits, block_k, range_k)


def test_ranges_cover_k_in_order():
    plan = split_plan(40, 512, "down")
    assert plan.ranges() == [(s * 128, (s + 1) * 128) for s in range(4)]
    assert split_plan(40, 100, "o").ranges() == [(0, 100)]


def test_unknown_role_rejected():
    with pytest.raises(ValueError, match="role"):
        split_plan(16, 64, "attention")


@pytest.mark.parametrize("m", [1, 2, 5, 16, 17, 64, 65, 256, 257, 1024, 5000])
def test_launch_kind_follows_m_only_among_equal_plans(m):
    split = choose_launch(split_plan(40, 512, "down"), m)
    single = choose_launch(split_plan(40, 100, "qkv"), m)
    assert split.kind in (SPLIT_GRID, TMA)
    assert single.kind in (RANGES, TMA)
    assert split == choose_launch(split_plan(40, 512, "down"), m)  # a function of (plan, M)
    for plan in (split_plan(40, 512, "down"), split_plan(40, 100, "qkv")):
        fallback = choose_launch(plan, m, tma=False)
        assert fallback.kind == pointer_kind(plan)
        tiles = choose_launch(plan, m)
        assert (fallback.block_m, fallback.block_n) == (tiles.block_m, tiles.block_n)


def test_every_range_holds_two_steps():
    for k in (64, 128, 192, 256, 512, 1024, 4096, 14336):
        plan = split_plan(64, k, "down")
        assert plan.splits == 1 or plan.range_k >= 2 * plan.block_k


def test_launch_rejects_empty_batch():
    with pytest.raises(ValueError):
        choose_launch(split_plan(40, 512, "down"), 0)


def test_a_biased_role_has_two_steps_in_its_range():
    """Triton compiles `dot(a, b, 0) + bias` as `dot(a, b, bias)` (measured on the H200): a
    role that may carry a bias never has a one-step range."""
    for k in (32, 48, 64, 96, 128, 256, 576, 4096):
        plan = split_plan(128, k, "qkv")
        assert plan.range_k >= 2 * plan.block_k and plan.range_k < k + plan.block_k
    with pytest.raises(ValueError, match="K > 16"):
        split_plan(128, 16, "qkv")


def test_table_launches_hold_every_launch_m_picks():
    for plan in (
        split_plan(40, 512, "down"),
        split_plan(40, 100, "qkv"),
        split_plan(9000, 64, "o"),
    ):
        every = table_launches(plan)
        assert len(every) == len(set(every))
        for m in (1, 16, 17, 64, 65, 256, 257, 5000):
            assert choose_launch(plan, m) in every and choose_launch(plan, m, tma=False) in every
