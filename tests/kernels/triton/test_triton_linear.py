"""Split-plan linear: every row's bits are independent of M and of the launch (interpreter)."""

from __future__ import annotations

import pytest
import torch
from triton_bits import differing_rows, same_bits

from samebits.kernels.triton.launches import COLUMN_TABLE, NARROW_ROWS, SPLIT_TABLE, Launch
from samebits.kernels.triton.linear import TritonLinear, choose_launch, linear, split_plan

# (role, n, k): splits 4, 2, 1; odd N; K not a multiple of 64; BK = 32 for small K.
CASES = [
    ("down", 40, 512),
    ("o", 24, 256),
    ("o", 70, 128),
    ("qkv", 33, 100),
    ("gate_up", 48, 48),
    ("lm_head", 20, 16),
]
BATCH_SIZES = (1, 2, 5, 16, 17, 64, 65, 100)
PROBE_ROWS = (0, 1, 4, 15, 16, 31, 33, 63, 64, 99)


def _operands(n: int, k: int, with_bias: bool, rows: int = 100, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = (
        torch.randn((rows, k), generator=g)
        * torch.logspace(-2, 2, k)[torch.randperm(k, generator=g)]
    )
    w = torch.randn((n, k), generator=g) / k**0.5
    b = torch.randn((n,), generator=g) if with_bias else None
    return x, w, b


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize(("role", "n", "k"), CASES)
def test_rows_independent_of_batch_size(role, n, k, with_bias):
    x, w, b = _operands(n, k, with_bias)
    plan = split_plan(n, k, role)
    single = {i: linear(x[i : i + 1], w, b, plan, torch.float32) for i in PROBE_ROWS}
    for m in BATCH_SIZES:
        y = linear(x[:m].contiguous(), w, b, plan, torch.float32)
        for i in (i for i in PROBE_ROWS if i < m):
            assert same_bits(y[i : i + 1], single[i]), f"{role} n={n} k={k} M={m} row {i}"


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize(("role", "n", "k"), CASES)
def test_launches_give_same_bits(role, n, k, with_bias):
    x, w, b = _operands(n, k, with_bias, rows=37, seed=1)
    plan = split_plan(n, k, role)
    launches = [
        Launch("split_grid", 16, 32, 4, 4),
        Launch("split_grid", 32, 64, 8, 3),
        Launch("ranges", 16, 16, 4, 4),
        Launch("ranges", 64, 128, 8, 3),
        Launch("tma", 16, 32, 4, 2, 8),
        Launch("tma", 32, 64, 4, 2, 1),
        choose_launch(plan, 37),
    ]
    ref = linear(x, w, b, plan, torch.float32, launches[0])
    for launch in launches[1:]:
        y = linear(x, w, b, plan, torch.float32, launch)
        assert same_bits(y, ref), f"{launch}: rows {differing_rows(y, ref)}"


def test_every_launch_table_row_same_bits():
    x, w, b = _operands(40, 512, True, rows=40, seed=2)
    plan = split_plan(40, 512, "down")
    ref = linear(x, w, b, plan, torch.float32, Launch("split_grid", 16, 64, 4, 4))
    for _, _, bm, bn, warps, stages, group in {*COLUMN_TABLE, *NARROW_ROWS.values(), *SPLIT_TABLE}:
        for kind in ("split_grid", "ranges", "tma"):
            y = linear(x, w, b, plan, torch.float32, Launch(kind, bm, bn, warps, stages, group))
            assert same_bits(y, ref), f"{kind} {bm}x{bn}: rows {differing_rows(y, ref)}"


def test_large_batch_row_matches_single_row():
    x, w, b = _operands(24, 256, True, rows=300, seed=3)
    plan = split_plan(24, 256, "o")
    y = linear(x, w, b, plan, torch.float32)  # M = 300: the largest launch of the split table
    for i in (0, 127, 128, 299):
        assert same_bits(y[i : i + 1], linear(x[i : i + 1], w, b, plan, torch.float32))


@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize(("role", "n", "k"), CASES)
def test_accuracy_against_float64(role, n, k, with_bias):
    x, w, b = _operands(n, k, with_bias, rows=23, seed=4)
    y = linear(x, w, b, split_plan(n, k, role), torch.float32)
    ref = x.double() @ w.double().T + (b.double() if b is not None else 0.0)
    bound = x.double().abs() @ w.double().abs().T + (b.double().abs() if b is not None else 0.0)
    assert ((y.double() - ref).abs() <= 1e-6 * bound + 1e-30).all()


def test_out_dtype_is_a_final_cast():
    """bf16 output: a cast of the fp32 result, rows still batch-invariant.

    The interpreter's fp32 -> bf16 cast truncates (the GPU rounds to nearest even), so equality
    with ``torch``'s cast is only checked to one bf16 ulp here; the exact check is a GPU test.
    """
    x, w, b = _operands(70, 128, True, rows=9, seed=5)
    plan = split_plan(70, 128, "o")
    y32 = linear(x, w, b, plan, torch.float32)
    y16 = linear(x, w, b, plan, torch.bfloat16)
    assert y16.dtype == torch.bfloat16
    assert ((y16.float() - y32).abs() <= y32.abs() * 2.0**-7).all()
    assert same_bits(y16[4:5], linear(x[4:5], w, b, plan, torch.bfloat16))


def test_triton_linear_wrapper():
    x, w, b = _operands(33, 100, True, rows=7, seed=6)
    layer = TritonLinear(w, b, "qkv", torch.float32)
    assert layer.shape == (33, 100) and layer.plan == split_plan(33, 100, "qkv")
    y = layer(x)
    assert same_bits(y, linear(x, w, b, layer.plan, torch.float32))
    assert same_bits(y[3:4], layer(x[3:4].contiguous()))


def test_rejects_bad_inputs():
    x, w, _ = _operands(20, 64, False, rows=3)
    plan = split_plan(20, 64, "qkv")
    with pytest.raises(ValueError, match="contiguous"):
        linear(x.t().contiguous().t(), w, None, plan, torch.float32)
    with pytest.raises(ValueError, match="x must be"):
        linear(x[:, :32], w, None, plan, torch.float32)
    with pytest.raises(TypeError):
        linear(x.double(), w, None, plan, torch.float32)


def test_zero_rows_give_empty_output():
    """A step that samples no row calls the LM head on zero rows."""
    x, w, _ = _operands(20, 64, False, rows=1)
    y = TritonLinear(w, None, "lm_head", torch.float32)(x[:0])
    assert y.shape == (0, 20) and y.dtype == torch.float32
