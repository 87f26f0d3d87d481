"""`kernels/replay/attention.py`: the software exp2's definition and accuracy (`softexp2`, kept
for the row kernels' family; the attention's exponential is `ex2q`, tests/kernels/test_replay_ex2q.py), and the
attention replay's agreement with float64 softmax attention (a sanity bound: the bitwise
claim against the GPU kernel is benchmarks/replay_attention_check.py's, on the H200)."""

from __future__ import annotations

import numpy as np
import pytest

from samebits.kernels.cpu import mma_emu
from samebits.kernels.replay import attention as ra
from samebits.kernels.replay.linear import fp32_to_bf16_bits
from samebits.kernels.replay.softexp import softexp2


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    ia, ib = (x.astype(np.float32).view(np.int32).astype(np.int64) for x in (a, b))
    return np.abs(ia - ib)


def test_softexp2_special_values():
    x = np.array([-np.inf, 0.0, -0.0, 1.0, -1.0, 127.0, 128.0, np.inf, -200.0], np.float32)
    y = softexp2(x)
    assert (
        y.view(np.uint32).tolist()[:6]
        == np.array([0.0, 1.0, 1.0, 2.0, 0.5, 2.0**127], np.float32).view(np.uint32).tolist()
    )
    assert np.isposinf(y[6]) and np.isposinf(y[7]) and y[8] == 0.0
    nan = np.array([0x7FC12345], np.uint32).view(np.float32)
    assert softexp2(nan).view(np.uint32)[0] == 0x7FC12345  # NaN in, the same NaN out


def test_softexp2_integers_are_exact_and_accuracy_is_4_ulp():
    k = np.arange(-126, 128, dtype=np.float32)
    assert np.array_equal(softexp2(k), np.exp2(k.astype(np.float64)).astype(np.float32))
    x = np.random.default_rng(0).uniform(-126, 127, 200_000).astype(np.float32)
    ref = np.exp2(x.astype(np.float64)).astype(np.float32)
    assert ulps(softexp2(x), ref).max() <= 4


def bf16(a: np.ndarray) -> np.ndarray:
    return fp32_to_bf16_bits(a.astype(np.float32).view(np.uint32))


def widen(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)


@pytest.fixture(scope="module")
def problem():
    rng = np.random.default_rng(3)
    t, heads, hkv, d = 40, 4, 2, 16
    q, k, v = (bf16(rng.standard_normal(s)) for s in ((t, heads, d), (t, hkv, d), (t, hkv, d)))
    return q, k, v, np.arange(t)


def reference(q, k, v, positions, group, scale, window=0):
    qf, kf, vf = widen(q), widen(k), widen(v)
    out = np.empty(q.shape)
    for i, pos in enumerate(positions):
        lo = max(pos - window + 1, 0) if window else 0
        for h in range(q.shape[1]):
            keys = kf[lo : pos + 1, h // group]
            s = keys @ qf[i, h] * scale
            p = np.exp(s - s.max())
            out[i, h] = p @ vf[lo : pos + 1, h // group] / p.sum()
    return out


@pytest.mark.skipif(not mma_emu.available(), reason="needs the native MMA emulator (C compiler)")
@pytest.mark.parametrize("window", [0, 7])
def test_replay_is_softmax_attention_within_bf16_rounding(problem, window):
    q, k, v, positions = problem
    scale = 16**-0.5
    launch = ra.Launch(block_n=16, span=32, qk_scale=scale * 1.4426950408889634)
    got = widen(ra.paged_attention(q, k, v, positions, 2, launch, window))
    ref = reference(q, k, v, positions, 2, scale, window)
    # p and the output are bf16: a few bf16 ulps of the largest value
    assert np.abs(got - ref).max() < 0.03


@pytest.mark.skipif(not mma_emu.available(), reason="needs the native MMA emulator (C compiler)")
def test_window_past_the_start_is_full_attention_bitwise(problem):
    q, k, v, positions = problem
    launch = ra.Launch(block_n=16, span=32, qk_scale=0.36067376)
    full = ra.paged_attention(q[-3:], k, v, positions[-3:], 2, launch)
    wide = ra.paged_attention(q[-3:], k, v, positions[-3:], 2, launch, window=64)
    narrow = ra.paged_attention(q[-3:], k, v, positions[-3:], 2, launch, window=20)
    assert np.array_equal(full.view(np.uint16), wide.view(np.uint16))
    assert not np.array_equal(full, narrow)
