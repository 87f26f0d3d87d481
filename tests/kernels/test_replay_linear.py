"""CPU replay of the GPU plan's split-plan linear (samebits.kernels.replay): equal, bit for bit,
to a slow model of the same definition written independently here (numpy MMA reference
mma_model.py per range, element-by-element fp32 sums, torch's bf16 rounding); the ranges are
summed in the plan's order (a test that fails for any other order); the numpy fallback is
announced."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from samebits.kernels.cpu import mma_cases, mma_emu, mma_model
from samebits.kernels.replay import (
    ReplayLinear,
    fp32_to_bf16_bits,
    ordered_sum,
    sum_add_residual,
)
from samebits.kernels.splitplan import SplitPlan, split_plan


def _bf16(values) -> np.ndarray:
    return mma_cases.bf16_bits(np.asarray(values, np.float32))


def _random(rng, shape, scale=1.0) -> np.ndarray:
    return _bf16(rng.standard_normal(shape) * scale)


def _torch_bf16(f32: np.ndarray) -> np.ndarray:
    """Independent fp32 -> bf16 rounding (torch's, round to nearest even)."""
    t = torch.from_numpy(np.ascontiguousarray(f32, np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def _slow_partials(x, w, plan: SplitPlan) -> list[np.ndarray]:
    """The reference: each range's columns (zeros past K, range_k wide) through mma_model."""
    chains = []
    for s in range(plan.splits):
        cols = np.arange(s * plan.range_k, (s + 1) * plan.range_k)
        keep = cols < plan.k
        xs = np.where(keep[None, :], x[:, np.minimum(cols, plan.k - 1)], 0).astype(np.uint16)
        ws = np.where(keep[None, :], w[:, np.minimum(cols, plan.k - 1)], 0).astype(np.uint16)
        chains.append(mma_model.mma_chain(xs, ws).view(np.float32))
    return chains


def _add(a, b) -> np.float32:
    """One fp32 add in the GPU's NaN convention (canonical 0x7FFFFFFF)."""
    with np.errstate(invalid="ignore", over="ignore"):
        total = np.float32(np.float32(a) + np.float32(b))
    return np.uint32(0x7FFFFFFF).view(np.float32) if np.isnan(total) else total


def _slow_linear(x, w, bias, plan: SplitPlan, out_dtype: str, order=None) -> np.ndarray:
    """Element by element: c_0 + c_1 + ... (in `order`, default the plan's) + bias, cast
    (fp32 -> bf16 by torch, NaN -> 0x7FFF)."""
    chains = _slow_partials(x, w, plan)
    order = list(range(plan.splits)) if order is None else order
    out = np.empty(chains[0].shape, np.float32)
    for i, j in np.ndindex(out.shape):
        total = np.float32(chains[order[0]][i, j])
        for s in order[1:]:
            total = _add(total, chains[s][i, j])
        if bias is not None:
            total = _add(total, bias[j])
        out[i, j] = total
    if out_dtype == "float32":
        return out.view(np.uint32)
    return np.where(np.isnan(out), np.uint16(0x7FFF), _torch_bf16(out))


CASES = [  # (n, k, role, m, bias, out dtype): S = 4, 2, 1; padded ranges; tiny block_k
    (40, 512, "o", 3, False, "bfloat16"),
    (24, 256, "down", 5, True, "bfloat16"),
    (33, 96, "qkv", 2, True, "float32"),  # S = 1, range_k 128 > K: zero-padded steps
    (20, 48, "gate_up", 4, False, "bfloat16"),  # block_k 32, range_k 64
    (17, 192, "lm_head", 1, False, "float32"),
    (16, 384, "o", 3, True, "float32"),  # S = 2 (384 = 2 * 192, 3 steps per range)
]


@pytest.mark.parametrize(("n", "k", "role", "m", "has_bias", "out_dtype"), CASES)
def test_replay_equals_slow_model(n, k, role, m, has_bias, out_dtype):
    rng = np.random.default_rng(n * 1000 + k)
    plan = split_plan(n, k, role)
    x, w = _random(rng, (m, k)), _random(rng, (n, k), 0.05)
    bias = rng.standard_normal(n).astype(np.float32) if has_bias else None
    got = ReplayLinear(w, bias, plan, out_dtype)(x)
    want = _slow_linear(x, w, bias, plan, out_dtype)
    assert got.dtype == want.dtype
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} outputs differ"


def test_replay_input_classes_equal_slow_model():
    """Every MMA input class (signed zeros, subnormals, inf/NaN, cancellations...) as x and w."""
    plan = split_plan(16, 256, "down")  # S = 2
    nans = 0
    for kind in mma_cases.KINDS:
        x, w, _ = mma_cases.make_case(kind, 3, 16, 256, np.random.default_rng(7))
        for out_dtype in ("float32", "bfloat16"):
            got = ReplayLinear(w, None, plan, out_dtype)(x)
            assert np.array_equal(got, _slow_linear(x, w, None, plan, out_dtype)), kind
        nans += np.count_nonzero(got == 0x7FFF)
    assert nans > 0  # the special class reached the NaN rules


def test_row_independent_of_batch():
    rng = np.random.default_rng(3)
    plan = split_plan(48, 512, "o")
    lin = ReplayLinear(_random(rng, (48, 512)), None, plan)
    x = _random(rng, (9, 512))
    full = lin(x)
    for i in (0, 4, 8):
        assert np.array_equal(lin(x[i : i + 1]), full[i : i + 1])


def _ordered_case():
    """Plan o [16, 512] (S = 4, range_k 128) with chain values c = (1, 2^25, -2^25, 0) for
    output 0: ((1 + 2^25) - 2^25) + 0 = 0 in fp32, while 1 + (2^25 - 2^25) = 1."""
    plan = split_plan(16, 512, "o")
    assert (plan.splits, plan.range_k) == (4, 128)
    x, w = np.zeros((1, 512), np.float32), np.zeros((16, 512), np.float32)
    x[0, [0, 128, 256]] = 1.0
    w[0, [0, 128, 256]] = [1.0, 2.0**25, -(2.0**25)]
    return plan, _bf16(x), _bf16(w)


def test_ranges_summed_in_plan_order():
    plan, x, w = _ordered_case()
    lin = ReplayLinear(w, None, plan, "float32")
    partials = lin.partials(x).view(np.float32)
    assert partials[:, 0, 0].tolist() == [1.0, 2.0**25, -(2.0**25), 0.0]
    assert lin(x).view(np.float32)[0, 0] == 0.0  # ((1 + 2^25) - 2^25) + 0
    other = _slow_linear(x, w, None, plan, "float32", order=[1, 2, 0, 3])
    assert other.view(np.float32)[0, 0] == 1.0  # the test can tell the orders apart


def test_random_ranges_order_and_structure_matter():
    """On random data another summation order, or one chain over all of K (S = 1), gives other
    bits on some outputs: the replay's equality with the plan-order model is not vacuous."""
    rng = np.random.default_rng(11)
    plan = split_plan(64, 1024, "down")
    x, w = _random(rng, (4, 1024)), _random(rng, (64, 1024))
    got = ReplayLinear(w, None, plan, "float32")(x)
    assert np.array_equal(got, _slow_linear(x, w, None, plan, "float32"))
    reverse = _slow_linear(x, w, None, plan, "float32", order=[3, 2, 1, 0])
    one_chain = mma_model.mma_chain(x, w)
    assert np.count_nonzero(got != reverse) > 0
    assert np.count_nonzero(got != one_chain) > 0


def test_ordered_sum_and_fused_residual():
    rng = np.random.default_rng(5)
    p = rng.standard_normal((3, 4, 8)).astype(np.float32) * np.float32(100)
    bias = rng.standard_normal(8).astype(np.float32)
    res = rng.standard_normal((4, 8)).astype(np.float32)
    total = ((p[0] + p[1]) + p[2]) + bias
    assert np.array_equal(ordered_sum(p, bias, "float32"), total.view(np.uint32))
    out, new_res = sum_add_residual(p, bias, res)
    assert np.array_equal(out, _torch_bf16(total))
    back = torch.from_numpy(out.view(np.int16)).view(torch.bfloat16).float().numpy()
    assert np.array_equal(new_res.view(np.uint32), (res + back).view(np.uint32))


def test_bf16_rounding_matches_torch_and_nan():
    rng = np.random.default_rng(1)
    bits = rng.integers(0, 2**32, 200_000, dtype=np.uint64).astype(np.uint32)
    finite = bits[~np.isnan(bits.view(np.float32))]
    assert np.array_equal(fp32_to_bf16_bits(finite), _torch_bf16(finite.view(np.float32)))
    nan = np.array([0x7FC00000, 0xFFC00001, 0x7F800001], np.uint32)
    assert fp32_to_bf16_bits(nan).tolist() == [0x7FFF] * 3


def test_decoded_weight_equals_chain_bits():
    for kind in ("normal", "special", "subnormal_in", "accin"):
        x, w, acc = mma_cases.make_case(kind, 5, 37, 128, np.random.default_rng(2))
        d = mma_emu.DecodedWeight(w)
        assert np.array_equal(d.chain(x), mma_emu.chain_bits(x, w)), kind
        assert np.array_equal(d.chain(x, acc), mma_emu.chain_bits(x, w, acc)), kind
        assert np.array_equal(d.chain(x[:1], threads=1), mma_emu.chain_bits(x[:1], w)), kind


def test_fallback_announced(monkeypatch):
    rng = np.random.default_rng(4)
    plan = split_plan(16, 256, "down")
    x, w = _random(rng, (2, 256)), _random(rng, (16, 256))
    want = ReplayLinear(w, None, plan)(x)
    monkeypatch.setattr(mma_emu, "available", lambda: False)
    monkeypatch.setattr(mma_emu, "build_error", lambda: "no compiler (test)")
    lin = ReplayLinear(w, None, plan)
    with pytest.warns(UserWarning, match="native emulator unavailable"):
        got = lin(x)
    assert np.array_equal(got, want)


def test_bad_input_raises():
    plan = split_plan(16, 256, "down")
    w = np.zeros((16, 256), np.uint16)
    with pytest.raises(ValueError, match="out_dtype"):
        ReplayLinear(w, None, plan, "float16")
    with pytest.raises(ValueError, match="weight"):
        ReplayLinear(w[:, :128], None, plan)
    with pytest.raises(ValueError, match="bias"):
        ReplayLinear(w, np.zeros(16, np.float64), plan)
    with pytest.raises(ValueError, match="x must be bf16"):
        ReplayLinear(w, None, plan)(np.zeros((2, 256), np.float32))
