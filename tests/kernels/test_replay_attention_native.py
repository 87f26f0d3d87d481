"""The native replay attention (`kernels/cpu/replay_attn.c`) against the numpy reference
(`replay/attention.py`: `attend_row`), bit for bit: windows, several spans, groups, the
query rows of a chunk at any positions, scores that overflow, and inf / NaN in the cache."""

from __future__ import annotations

import numpy as np
import pytest

from samebits.kernels.cpu import mma_emu
from samebits.kernels.replay import attention as ra
from samebits.kernels.replay.linear import fp32_to_bf16_bits

pytestmark = pytest.mark.skipif(
    not mma_emu.available(), reason="needs the native MMA emulator (C compiler)"
)


def bf16(a: np.ndarray) -> np.ndarray:
    return fp32_to_bf16_bits(a.astype(np.float32).view(np.uint32))


def problem(seed: int, t: int, heads: int, hkv: int, d: int, scale: float = 1.0):
    rng = np.random.default_rng(seed)
    shapes = ((t, heads, d), (t, hkv, d), (t, hkv, d))
    return tuple(bf16(rng.standard_normal(s) * scale) for s in shapes)


def assert_same_bits(q, k, v, positions, group, launch, window=0):
    got = ra.paged_attention(q, k, v, positions, group, launch, window, "float32")
    ref = ra.paged_attention_numpy(q, k, v, positions, group, launch, window, "float32")
    assert got.dtype == ref.dtype == np.uint32
    assert np.array_equal(got, ref), f"{int((got != ref).sum())} words differ"


CASES = [  # t, heads, hkv, d, block_n, span, window, value scale
    (40, 4, 2, 16, 16, 32, 0, 1.0),
    (40, 4, 2, 16, 16, 32, 7, 3.0),
    (70, 2, 1, 32, 16, 64, 20, 0.5),
    (50, 3, 3, 16, 32, 32, 0, 10.0),
    (90, 8, 2, 32, 32, 64, 0, 1.0),
]


@pytest.mark.parametrize(("t", "heads", "hkv", "d", "bn", "span", "window", "scale"), CASES)
def test_native_equals_numpy_reference(t, heads, hkv, d, bn, span, window, scale):
    q, k, v = problem(t + heads, t, heads, hkv, d, scale)
    launch = ra.Launch(bn, span, 0.36067376 * scale)
    assert_same_bits(q, k, v, np.arange(t), heads // hkv, launch, window)


def test_a_chunk_of_rows_at_later_positions():
    q, k, v = problem(5, 60, 4, 2, 16)
    launch = ra.Launch(16, 32, 0.36067376)
    positions = np.array([33, 47, 48, 59])
    assert_same_bits(q[:4], k, v, positions, 2, launch)
    assert_same_bits(q[:4], k, v, positions, 2, launch, window=17)


def test_overflowing_scores_and_specials_in_the_cache():
    q, k, v = problem(9, 48, 2, 1, 16, scale=1e18)  # q . k overflows fp32: inf, inf - inf
    launch = ra.Launch(16, 32, 0.36067376)
    assert_same_bits(q, k, v, np.arange(48), 2, launch)
    q, k, v = problem(11, 48, 2, 1, 16)
    k[10, 0, 3] = 0x7F80  # +inf
    v[20, 0, 5] = 0x7FC1  # a NaN with a payload
    v[30, 0, 0] = 0xFF80  # -inf
    assert_same_bits(q, k, v, np.arange(48), 2, launch)
    assert_same_bits(q, k, v, np.arange(48), 2, launch, window=9)


def test_bfloat16_output_is_the_cast_of_the_fp32_rows():
    q, k, v = problem(13, 20, 2, 1, 16)
    launch = ra.Launch(16, 32, 0.36067376)
    rows = ra.paged_attention(q, k, v, np.arange(20), 2, launch, 0, "float32")
    cast = ra.paged_attention(q, k, v, np.arange(20), 2, launch)
    assert np.array_equal(cast, fp32_to_bf16_bits(rows))


def test_bad_arguments_are_refused():
    q, k, v = problem(1, 8, 2, 1, 16)
    launch = ra.Launch(16, 32, 0.36067376)
    with pytest.raises(ValueError, match="position outside"):
        ra.paged_attention(q, k, v, np.array([0, 1, 2, 3, 4, 5, 6, 8]), 2, launch)
    with pytest.raises(ValueError, match="group"):
        ra.paged_attention(q, k, v, np.arange(8), 1, launch)
    with pytest.raises(ValueError, match="out_dtype"):
        ra.paged_attention(q, k, v, np.arange(8), 2, launch, out_dtype="float16")
