"""Bitwise batch-invariance of every op of the invariant plan: row r of op(X) equals
op(X[r:r+1]) for many row counts M and for thread counts 1 and 2."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from samebits.kernels.cpu.numba_env import numba
from samebits.kernels.ops import InvariantOps
from samebits.kernels.plan import KEY_TILE, LINEAR_TILES
from samebits.model.rope_tables import rope_tables

ROW_COUNTS = (1, 2, 3, 7, 8, 16, 33, 64, 128)
HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 576, 1536, 9, 3, 64, 49152


@pytest.fixture(params=[1, 2], ids=lambda t: f"threads{t}")
def threads(request):
    old_torch, old_numba = torch.get_num_threads(), numba.get_num_threads()
    torch.set_num_threads(request.param)
    numba.set_num_threads(min(request.param, numba.config.NUMBA_NUM_THREADS))
    yield request.param
    torch.set_num_threads(old_torch)
    numba.set_num_threads(old_numba)


@pytest.fixture(scope="module", params=["sbgemm", "mkl-tiles"])
def ops(request) -> InvariantOps:
    return InvariantOps(LINEAR_TILES, KEY_TILE, request.param, num_threads=2)


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def assert_row_invariant(op, x: torch.Tensor) -> None:
    """op applied to the first M rows, for each M, matches op on single rows bit for bit."""
    singles = torch.cat([op(x[r : r + 1]) for r in range(x.shape[0])])
    for m in ROW_COUNTS:
        got = op(x[:m])
        assert torch.equal(got, singles[:m]), f"rows differ at M={m}"


@pytest.mark.parametrize(
    "shape",
    [(HIDDEN, 3 * HIDDEN // 9 * 5), (HIDDEN, HIDDEN), (HIDDEN, 2 * INTER), (INTER, HIDDEN)],
    ids=lambda s: f"{s[0]}x{s[1]}",
)
def test_linear_row_invariant(ops, threads, shape):
    k, n = shape
    lin = ops.linear(_rand(n, k, seed=1) * 0.05, _rand(n, seed=2))
    assert_row_invariant(lin, _rand(128, k))


def test_logits_linear_row_invariant(ops, threads):
    lin = ops.linear(_rand(VOCAB, HIDDEN, seed=3) * 0.05, None)
    assert_row_invariant(lin, _rand(128, HIDDEN))


def test_rms_norm_row_invariant(ops, threads):
    w = _rand(HIDDEN, seed=4)
    assert_row_invariant(lambda x: ops.rms_norm(x.contiguous(), w, 1e-5), _rand(128, HIDDEN))


def test_add_rms_norm_row_invariant(ops, threads):
    """Input rows carry [x | residual]; output rows are [normed | x + residual]."""
    w = _rand(HIDDEN, seed=5)

    def op(xr):
        x, res = xr[:, :HIDDEN].clone(), xr[:, HIDDEN:].clone()
        normed, summed = ops.add_rms_norm(x, res, w, 1e-5)
        return torch.cat([normed, summed], 1)

    assert_row_invariant(op, _rand(128, 2 * HIDDEN))


def test_silu_mul_row_invariant(ops, threads):
    assert_row_invariant(lambda x: ops.silu_mul(x.contiguous()), _rand(128, 2 * INTER) * 4)


def test_qk_norm_and_rope_row_invariant(ops, threads):
    """Input rows carry [position | q heads]; positions are exact small integers."""
    cos, sin = rope_tables(HEAD_DIM, 10000.0, None, 256)
    w = _rand(HEAD_DIM, seed=7)

    def op(row):
        pos = row[:, 0].to(torch.int64).numpy()
        y = row[:, 1:].reshape(row.shape[0], HEADS, HEAD_DIM).clone()
        ops.head_rms_norm(y, w, 1e-6)
        ops.rope(y, SimpleNamespace(positions=pos), cos, sin)  # CPU rope reads batch.positions
        return y.reshape(row.shape[0], -1)

    positions = torch.randint(0, 256, (128, 1), generator=torch.Generator().manual_seed(8))
    assert_row_invariant(op, torch.cat([positions.float(), _rand(128, HEADS * HEAD_DIM)], 1))


def test_numba_ops_independent_of_thread_count(ops):
    """By construction the numba ops also give the same bits for any thread count."""
    x = _rand(64, 2 * INTER)
    results = []
    for t in (1, 2):
        numba.set_num_threads(min(t, numba.config.NUMBA_NUM_THREADS))
        results.append(ops.silu_mul(x))
    assert torch.equal(results[0], results[1])


def test_sbgemm_is_thread_split_invariant_and_accurate(monkeypatch):
    """The C kernel gives the same bits on 1 or 2 threads (every column split) and agrees with
    a float64 reference to float32 accuracy."""
    from samebits.kernels.cpu import sbgemm

    w, x = _rand(1000, HIDDEN, seed=9) * 0.05, _rand(37, HIDDEN, seed=10)
    monkeypatch.setattr(sbgemm, "PARALLEL_MIN_MACS", 0)
    one, two = sbgemm.SbLinear(w, None, 1)(x), sbgemm.SbLinear(w, None, 2)(x)
    assert torch.equal(one, two)
    ref = x.double() @ w.double().t()
    assert (one.double() - ref).abs().max().item() < 1e-4
