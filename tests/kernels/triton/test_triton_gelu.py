"""Gemma's GeGLU kernel (`rows.gelu_mul`, `_gelu_kernel.py`; CPU interpreter): each row's bits
are independent of the batch and of the column block split; close to the float64 value of
transformers' gelu_pytorch_tanh(g) * u."""

from __future__ import annotations

import math

import pytest
import torch
from triton_bits import same_bits

from samebits.kernels.triton import rows
from samebits.kernels.triton.rows import gelu_mul, silu_mul


def _gate_up(m: int, inner: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn((m, 2 * inner), generator=g) * 3.0


def _reference(gu: torch.Tensor) -> torch.Tensor:
    inner = gu.shape[1] // 2
    g, u = gu[:, :inner].double(), gu[:, inner:].double()
    z = 2.0 * math.sqrt(2.0 / math.pi) * (g + 0.044715 * g**3)
    return g * torch.sigmoid(z) * u


@pytest.mark.parametrize("inner", [96, 1500])
def test_gelu_mul_rows_invariant_and_accurate(inner):
    gu = _gate_up(37, inner, seed=inner)
    full = gelu_mul(gu)
    for i in (0, 1, 6, 20, 36):
        assert same_bits(full[i : i + 1], gelu_mul(gu[i : i + 1].clone())), f"row {i}"
    assert same_bits(full[5:9], gelu_mul(gu[5:9].clone()))
    torch.testing.assert_close(full.double(), _reference(gu), rtol=2e-5, atol=1e-6)
    assert not same_bits(full, silu_mul(gu))  # another function of the same rows


def test_gelu_mul_block_split_irrelevant(monkeypatch):
    gu = _gate_up(5, 1500, seed=3)
    ref = gelu_mul(gu)
    monkeypatch.setattr(rows, "SILU_BLOCK", 256)  # 6 column blocks instead of 2
    assert same_bits(gelu_mul(gu), ref)


def test_gelu_mul_extremes():
    g = torch.tensor([-200.0, -30.0, -9.0, 0.0, 1e-30, 9.0, 30.0, 200.0])
    gu = torch.cat([g, torch.ones_like(g)])[None].contiguous()
    out = gelu_mul(gu)[0]
    assert torch.isfinite(out).all()
    assert out[0] == 0 and out[-1] == 200.0 and out[3] == 0
    torch.testing.assert_close(out.double(), _reference(gu)[0], rtol=2e-5, atol=1e-30)
