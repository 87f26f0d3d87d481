"""A step's small device arrays are copied in one buffer with every view 16-byte aligned
(`metadata.pack_aligned`, used by the runner's int64 arrays and the GPU attention's int32
metadata), so a Triton kernel taking one never sees a new pointer alignment (a new compiled
specialization) when a step's token or row count changes parity."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from samebits.kernels.metadata import VIEW_ALIGN_BYTES, pack_aligned, to_device_aligned


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
@pytest.mark.parametrize(
    "sizes", [(1, 1, 1, 1), (3, 3, 1, 3), (8192, 8192, 13, 8192), (0, 5, 0, 2)]
)
def test_views_start_on_16_bytes_and_keep_their_values(sizes, dtype):
    rng = np.random.default_rng(sum(sizes))
    arrays = [rng.integers(-(2**30), 2**30, size=n, dtype=np.int64) for n in sizes]
    host, offsets = pack_aligned(arrays, dtype)
    itemsize = np.dtype(dtype).itemsize
    assert all(off * itemsize % 16 == 0 for off in offsets)
    assert VIEW_ALIGN_BYTES == 16
    for a, off in zip(arrays, offsets, strict=True):
        assert np.array_equal(host[off : off + len(a)], a)
    assert offsets == sorted(offsets)
    assert all(b - a >= len(x) for a, b, x in zip(offsets, offsets[1:], arrays, strict=False))


def test_to_device_aligned_keeps_shapes():
    table = np.arange(12).reshape(3, 4)
    a, t = to_device_aligned([np.array([7, 8, 9]), table], np.int32, "cpu")
    assert a.dtype == torch.int32 and a.tolist() == [7, 8, 9]
    assert t.shape == (3, 4) and t.tolist() == table.tolist()
    assert t.data_ptr() % VIEW_ALIGN_BYTES == a.data_ptr() % VIEW_ALIGN_BYTES
