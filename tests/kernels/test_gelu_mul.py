"""Gemma's GeGLU row op (`Ops.gelu_mul`: gelu_pytorch_tanh(gate) * up): the C kernel
(sbrow.c) is row invariant bitwise (batch size, row offset, thread count, odd lengths), close
to the float64 tanh form of transformers' gelu_pytorch_tanh; the numba fallback and FastOps
agree with it by tolerance; InvariantOps runs the C kernel."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from samebits.bits import same_bits
from samebits.kernels.cpu import native, rowwise, sbrow
from samebits.kernels.cpu.ops import FastOps, InvariantOps
from samebits.kernels.cpu.plan import KEY_TILE, LINEAR_TILES

pytestmark = pytest.mark.skipif(not native.available(), reason="no C compiler here")
DIMS = (5, 70, 576, 1536)


@pytest.fixture(autouse=True)
def _always_parallel(monkeypatch):
    monkeypatch.setattr(sbrow, "PARALLEL_MIN_ELEMENTS", 0)


def _rand(*shape: int, seed: int = 0, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * scale


def _gelu_mul(gate_up: torch.Tensor, threads: int) -> torch.Tensor:
    out = torch.empty(gate_up.shape[0], gate_up.shape[1] // 2)
    sbrow.gelu_mul(gate_up.contiguous(), out, threads)
    return out


def _z(gate: torch.Tensor) -> torch.Tensor:
    """2 sqrt(2 / pi) (g + 0.044715 g^3) in float64: 0.5 (1 + tanh(z / 2)) = sigmoid(z)."""
    g = gate.double()
    return 2.0 * math.sqrt(2.0 / math.pi) * (g + 0.044715 * g**3)


def _reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """gelu_tanh(g) * u in float64, as g * sigmoid(z) (the tanh form loses all digits to
    cancellation in 1 + tanh for very negative g)."""
    return gate.double() * torch.sigmoid(_z(gate)) * up.double()


@pytest.mark.parametrize("inter", DIMS)
def test_gelu_mul_row_invariant(inter):
    x = _rand(13, 2 * inter, seed=inter, scale=4.0)
    singles = torch.cat([_gelu_mul(x[r : r + 1], 1) for r in range(13)])
    for threads in (1, 2, 3):
        for lo, hi in ((0, 13), (3, 10), (1, 2), (6, 13)):
            assert same_bits(_gelu_mul(x[lo:hi], threads), singles[lo:hi]), (threads, lo, hi)


def test_gelu_mul_accurate():
    """Relative error <= 2e-7 (8 + |z|) of the float64 value over g in [-12, 12] (results
    above 1e-30): float32 rounding of z = g (K1 + K2 g^2) is amplified by |z| in e^-|z|."""
    gate = torch.linspace(-12, 12, 100_001)[None]
    up = _rand(1, gate.shape[1], seed=1)
    out = _gelu_mul(torch.cat([gate, up], 1), 2).double()
    ref = _reference(gate, up)
    err = (out - ref).abs()
    big = ref.abs() > 1e-30
    bound = 2e-7 * (8.0 + _z(gate).abs())
    assert (err[big] / ref.abs()[big] <= bound[big]).all()
    assert (out[~big].abs() <= 1e-30).all()


def test_numba_and_fast_ops_agree():
    gate_up = _rand(9, 2 * 70, seed=2, scale=4.0)
    ref = _reference(gate_up[:, :70], gate_up[:, 70:])
    numba_out = torch.empty(9, 70)
    rowwise.gelu_mul(gate_up.numpy(), numba_out.numpy())
    torch.testing.assert_close(numba_out.double(), ref, rtol=2e-6, atol=1e-9)
    fast = FastOps("cpu").gelu_mul(gate_up)
    assert same_bits(fast, F.gelu(gate_up[:, :70], approximate="tanh") * gate_up[:, 70:])
    # torch computes 1 + tanh in float32: 0 where the true value is ~1e-6 (cancellation)
    torch.testing.assert_close(fast.double(), ref, rtol=1e-5, atol=5e-6)


def test_invariant_ops_use_the_c_kernel():
    gate_up = _rand(7, 3072, seed=10, scale=4.0)
    ops = InvariantOps(LINEAR_TILES, KEY_TILE, "sbgemm", num_threads=2)
    assert same_bits(ops.gelu_mul(gate_up), _gelu_mul(gate_up, 1))
    numba_ops = InvariantOps(LINEAR_TILES, KEY_TILE, "mkl-tiles", num_threads=1)
    assert not same_bits(numba_ops.gelu_mul(gate_up), ops.gelu_mul(gate_up))  # another kernel


def test_bad_input_raises():
    with pytest.raises(ValueError, match="gate_up"):
        sbrow.gelu_mul(torch.zeros(2, 9), torch.zeros(2, 4), 1)
