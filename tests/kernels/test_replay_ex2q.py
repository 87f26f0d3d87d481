"""`kernels/replay/ex2q.py`: the attention's exponential on the CPU (the GPU's ex2.approx.ftz
on a 2^-12 grid as a table): the table's identity and accuracy, the grid rounding, the special
values, the domain check, and the C replay's ex2q through the attention against numpy."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from samebits.kernels.replay import ex2q as E


def test_the_table_is_the_measured_one_and_close_to_exp2():
    assert E.TABLE.dtype == np.float32 and E.TABLE.size == E.GRID
    assert hashlib.sha256(E.TABLE.tobytes()).hexdigest() == E.TABLE_SHA256
    exact = np.exp2(np.arange(E.GRID) / E.GRID)
    assert E.TABLE[0] == 1.0 and np.all(np.diff(E.TABLE) > 0)
    assert np.max(np.abs(E.TABLE / exact - 1)) < 2e-7


def test_ex2q_accuracy_and_exact_powers():
    x = np.random.default_rng(0).uniform(-120, 0, 200_000).astype(np.float32)
    rel = np.abs(E.ex2q(x) / np.exp2(x.astype(np.float64)) - 1)
    assert rel.max() < E.MAX_REL_ERROR  # 2^-13 ln 2 from the grid, plus the table's 1.3e-7
    k = np.arange(-126, 1, dtype=np.float32)
    assert np.array_equal(E.ex2q(k), np.exp2(k.astype(np.float64)).astype(np.float32))


def test_grid_rounding_is_to_nearest_even_multiple_of_2_to_minus_12():
    u = np.float32(1 / 4096)
    x = np.array([-0.5, -1.5, -2.5, -2.4, -2.6], np.float32) * u
    assert E.grid_round(x).tolist() == pytest.approx([0.0, -2 * u, -2 * u, -2 * u, -3 * u])
    assert E.ex2q(np.array([-0.5 * u], np.float32))[0] == 1.0


def test_special_values_and_the_flush():
    x = np.array([-np.inf, -0.0, 0.0, -126.0, -126.0 - 1 / 4096, -127.0, -1e30, np.nan], np.float32)
    y = E.ex2q(x)
    assert y[:3].tolist() == [0.0, 1.0, 1.0]
    assert y[3] == np.float32(2.0**-126) and y[4:7].tolist() == [0.0, 0.0, 0.0]
    assert y.view(np.uint32)[7] == 0x7FFFFFFF


def test_off_grid_or_positive_inputs_are_outside_the_measured_domain():
    with pytest.raises(ValueError, match="outside the measured grid"):
        E.ex2_ftz_grid(np.array([-0.3], np.float32))
    with pytest.raises(ValueError, match="outside the measured grid"):
        E.ex2_ftz_grid(np.array([0.5], np.float32))
