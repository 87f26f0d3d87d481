"""The C row kernels (sbrow.c): bitwise row invariance (batch size, row position, thread
count), accuracy against float64 references, the in-place residual add, odd row lengths."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from samebits.bits import same_bits
from samebits.kernels.cpu import sbrow
from samebits.kernels.cpu.ops import InvariantOps
from samebits.kernels.cpu.plan import KEY_TILE, LINEAR_TILES

DIMS = (5, 70, 576, 1536)
THREADS = (1, 2, 3)
EPS = 1e-5


@pytest.fixture(autouse=True)
def _always_parallel(monkeypatch):
    monkeypatch.setattr(sbrow, "PARALLEL_MIN_ELEMENTS", 0)


def _rand(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


def _silu_mul(gate_up: torch.Tensor, threads: int) -> torch.Tensor:
    out = torch.empty(gate_up.shape[0], gate_up.shape[1] // 2)
    sbrow.silu_mul(gate_up.contiguous(), out, threads)
    return out


def _rms_norm(x: torch.Tensor, w: torch.Tensor, threads: int) -> torch.Tensor:
    out = torch.empty_like(x)
    sbrow.rms_norm(x.contiguous(), w, EPS, out, threads)
    return out


def _add_rms_norm(x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, threads: int):
    out, res = torch.empty_like(x), residual.clone()
    sbrow.add_rms_norm(x.contiguous(), res, w, EPS, out, threads)
    return out, res


def _assert_rows_invariant(op, x: torch.Tensor) -> None:
    """op on every row alone equals op on slices of x (other sizes and offsets), any threads."""
    singles = torch.cat([op(x[r : r + 1], 1) for r in range(x.shape[0])])
    for threads in THREADS:
        for lo, hi in ((0, x.shape[0]), (3, 10), (1, 2), (6, 13)):
            assert same_bits(op(x[lo:hi], threads), singles[lo:hi]), (threads, lo, hi)


@pytest.mark.parametrize("inter", DIMS)
def test_silu_mul_row_invariant(inter):
    _assert_rows_invariant(_silu_mul, _rand(13, 2 * inter, seed=inter, scale=6.0))


@pytest.mark.parametrize("dim", DIMS)
def test_rms_norm_row_invariant(dim):
    w = _rand(dim, seed=1)
    _assert_rows_invariant(lambda x, t: _rms_norm(x, w, t), _rand(13, dim, seed=dim))


@pytest.mark.parametrize("dim", DIMS)
def test_add_rms_norm_row_invariant(dim):
    """Rows carry [x | residual]; results are [normed | new residual]."""
    w = _rand(dim, seed=2)

    def op(xr: torch.Tensor, threads: int) -> torch.Tensor:
        return torch.cat(_add_rms_norm(xr[:, :dim], xr[:, dim:], w, threads), 1)

    _assert_rows_invariant(op, _rand(13, 2 * dim, seed=dim))


def _ulps(got: torch.Tensor, ref: torch.Tensor) -> np.ndarray:
    spacing = np.spacing(np.abs(ref.float().numpy())).astype(np.float64)
    return np.abs(got.double().numpy() - ref.numpy()) / spacing


@pytest.mark.parametrize("inter", DIMS)
def test_silu_mul_accurate(inter):
    """Within 5 float32 ulps of float64 silu(g) * u, over g in [-90, 90] (results below
    1e-30 in magnitude, which only come from the underflow of exp, within 1e-35)."""
    rows = 4096 // inter + 1
    wide = torch.rand(rows, inter, generator=torch.Generator().manual_seed(3)) * 180 - 90
    gate = torch.cat([_rand(rows, inter, seed=3, scale=4.0), wide])
    up = _rand(2 * rows, inter, seed=4)
    out = _silu_mul(torch.cat([gate, up], 1), 2)
    g64 = gate.double()
    ref = g64 * torch.sigmoid(g64) * up.double()
    normal = ref.abs() > 1e-30
    assert _ulps(out, ref)[normal.numpy()].max() <= 5.0
    assert (out.double() - ref)[~normal].abs().max() < 1e-35


@pytest.mark.parametrize("dim", DIMS)
def test_rms_norm_accurate(dim):
    x, w = _rand(40, dim, seed=5, scale=3.0), _rand(dim, seed=6)
    x64 = x.double()
    ref = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS) * w.double()
    assert _ulps(_rms_norm(x, w, 2), ref).max() <= 1.5


@pytest.mark.parametrize("dim", DIMS)
def test_add_rms_norm_updates_residual_in_place(dim):
    x, residual, w = _rand(9, dim, seed=7), _rand(9, dim, seed=8), _rand(dim, seed=9)
    x_before, res = x.clone(), residual.clone()
    out = torch.empty_like(x)
    sbrow.add_rms_norm(x, res, w, EPS, out, 2)
    assert same_bits(res, residual + x)
    assert same_bits(x, x_before)
    assert same_bits(out, _rms_norm(residual + x, w, 1))


def test_invariant_ops_use_the_c_kernels():
    ops = InvariantOps(LINEAR_TILES, KEY_TILE, "sbgemm", num_threads=2)
    gate_up, x, w = _rand(7, 3072, seed=10, scale=4.0), _rand(7, 576, seed=11), _rand(576)
    assert same_bits(ops.silu_mul(gate_up), _silu_mul(gate_up, 1))
    assert same_bits(ops.rms_norm(x, w, EPS), _rms_norm(x, w, 1))
    residual = _rand(7, 576, seed=12)
    normed, summed = ops.add_rms_norm(x, residual.clone(), w, EPS)
    assert same_bits(summed, residual + x)
    assert same_bits(normed, _rms_norm(residual + x, w, 1))


@pytest.mark.parametrize(
    "call",
    [
        lambda: sbrow.silu_mul(torch.zeros(2, 8, dtype=torch.float64), torch.zeros(2, 4), 1),
        lambda: sbrow.silu_mul(torch.zeros(2, 9), torch.zeros(2, 4), 1),
        lambda: sbrow.rms_norm(torch.zeros(2, 8), torch.zeros(7), EPS, torch.zeros(2, 8), 1),
        lambda: sbrow.add_rms_norm(
            torch.zeros(2, 8), torch.zeros(8, 2).T, torch.zeros(8), EPS, torch.zeros(2, 8), 1
        ),
    ],
    ids=["gate_up-dtype", "gate_up-shape", "w-shape", "residual-strided"],
)
def test_bad_input_raises(call):
    with pytest.raises(ValueError, match="expected a contiguous float32"):
        call()
