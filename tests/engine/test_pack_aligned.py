"""The runner's one host-to-device copy of a step's int64 arrays keeps every view 16-byte
aligned, so a Triton kernel taking one of them never sees a new pointer alignment (a new
compiled specialization) when a step's token or row count changes parity."""

from __future__ import annotations

import numpy as np
import pytest

from samebits.engine.runner import ALIGN_INT64, pack_aligned


@pytest.mark.parametrize(
    "sizes", [(1, 1, 1, 1), (3, 3, 1, 3), (8192, 8192, 13, 8192), (0, 5, 0, 2)]
)
def test_views_start_on_16_bytes_and_keep_their_values(sizes):
    rng = np.random.default_rng(sum(sizes))
    arrays = [rng.integers(-(2**40), 2**40, size=n, dtype=np.int64) for n in sizes]
    host, offsets = pack_aligned(arrays)
    assert all(off * 8 % 16 == 0 for off in offsets)
    assert ALIGN_INT64 * 8 == 16
    for a, off in zip(arrays, offsets, strict=True):
        assert np.array_equal(host[off : off + len(a)], a)
    assert offsets == sorted(offsets)
    assert all(b - a >= len(x) for a, b, x in zip(offsets, offsets[1:], arrays, strict=False))
