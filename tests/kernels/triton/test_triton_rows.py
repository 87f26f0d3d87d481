"""Row ops: each row's bits are independent of the batch; accuracy against float64."""

from __future__ import annotations

import pytest
import torch
from triton_bits import same_bits

from samebits.kernels.triton.rows import add_rms_norm, head_rms_norm, rms_norm, rope, silu_mul

EPS = 1e-6
PROBE_ROWS = (0, 1, 6, 20, 36)


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * 3.0


def _rms_ref(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x64 = x.double()
    return x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS) * w.double()


def _assert_rows_invariant(fn, x: torch.Tensor) -> None:
    full = fn(x.clone())
    for i in PROBE_ROWS:
        assert same_bits(full[i : i + 1], fn(x[i : i + 1].clone())), f"row {i}"


@pytest.mark.parametrize("width", [96, 256])
def test_rms_norm(width):
    x, w = _randn(37, width), _randn(width, seed=1)
    _assert_rows_invariant(lambda t: rms_norm(t, w, EPS, torch.float32), x)
    y = rms_norm(x, w, EPS, torch.float32)
    assert torch.allclose(y.double(), _rms_ref(x, w), rtol=1e-5, atol=1e-5)


def test_add_rms_norm_updates_residual_in_place():
    x, res, w = _randn(37, 96), _randn(37, 96, seed=2), _randn(96, seed=3)
    expected_res = res + x
    res_ptr = res.data_ptr()
    y = add_rms_norm(x, res, w, EPS, torch.float32)
    assert res.data_ptr() == res_ptr and same_bits(res, expected_res)
    assert same_bits(y, rms_norm(expected_res, w, EPS, torch.float32))
    fused = lambda t: add_rms_norm(t, torch.zeros_like(t) + 0.5, w, EPS, torch.float32)  # noqa: E731
    _assert_rows_invariant(fused, x)


def test_head_rms_norm_in_place():
    x, w = _randn(37, 3, 32, seed=4), _randn(32, seed=5)
    ref = _rms_ref(x, w)

    def normed(t: torch.Tensor) -> torch.Tensor:
        head_rms_norm(t, w, EPS)
        return t

    _assert_rows_invariant(normed, x)
    head_rms_norm(x, w, EPS)
    assert torch.allclose(x.double(), ref, rtol=1e-5, atol=1e-5)


def _rope_ref(x: torch.Tensor, pos: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
    half = x.shape[-1] // 2
    c, s = cos.double()[pos][:, None], sin.double()[pos][:, None]
    a, b = x.double()[..., :half], x.double()[..., half:]
    return torch.cat([a * c - b * s, b * c + a * s], dim=-1)


def test_rope_in_place():
    x = _randn(37, 5, 32, seed=6)
    pos = torch.randint(0, 50, (37,), generator=torch.Generator().manual_seed(7))
    angles = torch.arange(50.0)[:, None] * torch.logspace(0, -3, 16)[None, :]
    cos, sin = torch.cos(angles), torch.sin(angles)
    ref = _rope_ref(x, pos, cos, sin)

    full = x.clone()
    rope(full, pos, cos, sin)
    for i in PROBE_ROWS:
        one = x[i : i + 1].clone()
        rope(one, pos[i : i + 1].clone(), cos, sin)
        assert same_bits(full[i : i + 1], one), f"row {i}"
    assert torch.allclose(full.double(), ref, rtol=1e-5, atol=1e-5)


def test_silu_mul():
    gu = _randn(37, 2 * 80, seed=8)
    _assert_rows_invariant(silu_mul, gu)
    g, u = gu.double()[:, :80], gu.double()[:, 80:]
    ref = g * torch.sigmoid(g) * u
    assert torch.allclose(silu_mul(gu).double(), ref, rtol=1e-5, atol=1e-5)


def test_rejects_non_contiguous():
    x = _randn(8, 64)
    with pytest.raises(ValueError, match="contiguous"):
        rms_norm(x.t(), _randn(8), EPS, torch.float32)


@pytest.mark.parametrize("splits", [1, 2, 4])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("out_dtype", [torch.float32, torch.bfloat16])
def test_sum_add_rms_norm_is_ordered_sum_then_add_rms_norm(splits, bias, out_dtype):
    from samebits.kernels.triton.linear import ordered_sum
    from samebits.kernels.triton.rows import sum_add_rms_norm

    m, n = 13, 96
    partials = torch.stack([_randn(m, n, seed=10 + s) for s in range(splits)]).contiguous()
    b = _randn(n, seed=4) if bias else None
    res, w = _randn(m, n, seed=5), _randn(n, seed=6)
    y = torch.empty((m, n), dtype=out_dtype)
    ordered_sum(partials, b, y)
    res_ref = res.clone()
    want = add_rms_norm(y, res_ref, w, EPS, out_dtype)
    res_fused = res.clone()
    got = sum_add_rms_norm(partials, b, res_fused, w, EPS, out_dtype)
    assert same_bits(got, want) and same_bits(res_fused, res_ref)
    one = res[6:7].clone()
    row = sum_add_rms_norm(partials[:, 6:7].contiguous(), b, one, w, EPS, out_dtype)
    assert same_bits(row, want[6:7]) and same_bits(one, res_ref[6:7])


def test_sum_add_rms_norm_rejects_bad_shapes():
    from samebits.kernels.triton.rows import sum_add_rms_norm

    partials = torch.zeros((2, 4, 32))
    with pytest.raises(ValueError, match="residual"):
        sum_add_rms_norm(partials, None, torch.zeros((4, 16)), torch.ones(32), EPS, torch.float32)
    with pytest.raises(ValueError, match="fp32"):
        sum_add_rms_norm(partials.half(), None, torch.zeros((4, 32)), torch.ones(32), EPS,
                         torch.float32)  # fmt: skip
