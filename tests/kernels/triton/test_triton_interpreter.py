"""The interpreter's (patched) tl.dot must itself be row-stable, or no comparison means much."""

from __future__ import annotations

import numpy as np
import pytest
import triton.language as tl
from triton.runtime import interpreter
from triton.runtime.interpreter import TensorHandle


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    acc = TensorHandle(np.zeros((a.shape[0], b.shape[1]), np.float32), tl.float32)
    builder = interpreter.InterpreterBuilder
    out = builder.create_dot(
        None, TensorHandle(a, tl.float32), TensorHandle(b, tl.float32), acc, None, 0
    )
    return out.data


@pytest.mark.parametrize("k", [16, 64])
def test_dot_model_is_row_stable_and_accurate(k):
    rng = np.random.default_rng(k)
    a = (rng.standard_normal((128, k)) * np.logspace(-3, 3, k)).astype(np.float32)
    b = rng.standard_normal((k, 64)).astype(np.float32)
    full = _dot(a, b)
    for height in (16, 32, 64):
        for i in (0, 5, height - 1):
            assert np.array_equal(
                _dot(a[i : i + height], b)[0].view(np.int32), full[i].view(np.int32)
            )
    ref = a.astype(np.float64) @ b.astype(np.float64)
    bound = np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64))
    assert (np.abs(full - ref) <= 1e-6 * bound).all()
