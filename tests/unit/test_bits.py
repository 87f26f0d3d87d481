"""samebits.bits: same bits means same shape, dtype and bytes (not value equality)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from samebits.bits import differing_rows, same_bits


def test_signed_zeros_differ_and_nans_match():
    zeros = torch.tensor([0.0, 1.0])
    assert torch.equal(zeros, -zeros * torch.tensor([1.0, -1.0]))  # value equality is fooled
    assert not same_bits(zeros, torch.tensor([-0.0, 1.0]))
    assert not same_bits(np.array([0.0]), np.array([-0.0]))
    nan = torch.tensor([float("nan"), 2.0])
    assert not torch.equal(nan, nan.clone())
    assert same_bits(nan, nan.clone()) and same_bits(nan.numpy(), nan.numpy().copy())
    other_nan = nan.clone()
    other_nan.view(torch.int32)[0] ^= 1  # another NaN payload
    assert not same_bits(nan, other_nan)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int64])
def test_dtype_shape_and_layout(dtype):
    x = torch.arange(12).reshape(3, 4).to(dtype)
    assert same_bits(x, x.clone()) and same_bits(x.t(), x.t().contiguous())
    assert not same_bits(x, x.reshape(4, 3))
    assert not same_bits(x, x.to(torch.float64))
    if dtype != torch.bfloat16:
        assert same_bits(x, x.numpy()) and same_bits(x.numpy(), x)


def test_differing_rows():
    a = torch.zeros(4, 3)
    b = a.clone()
    b[1, 2], b[3, 0] = -0.0, 1e-30
    assert differing_rows(a, b) == [1, 3] and differing_rows(a, a.clone()) == []
    assert differing_rows(torch.tensor(0.0), torch.tensor(-0.0)) == [0]
    assert differing_rows(a, a[:2]) == [0, 1, 2, 3]
    assert differing_rows(np.zeros((2, 0)), np.zeros((2, 0))) == []
