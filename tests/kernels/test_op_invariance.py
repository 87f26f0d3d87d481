"""Bitwise batch-invariance of every op of the invariant plan: the first M rows of op(X),
for many row counts M, equal op applied to each row alone, bit for bit.

The batched call runs on the `threads` parametrization's thread count (the C kernels' pool
threads, with every call split whatever its size; torch's and numba's threads) and the
single rows on the reference configuration: one C thread for the native plan, whose kernels
are invariant across thread counts by construction; the same thread count for the mkl-tiles
plan, whose BLAS tiles are qualified per deployment (the thread count is in its fingerprint).
"""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace

import pytest
import torch

from samebits.bits import differing_rows, same_bits
from samebits.kernels.cpu import sbgemm, sbrow
from samebits.kernels.cpu.linear import TiledLinear, qualify
from samebits.kernels.cpu.numba_env import numba
from samebits.kernels.cpu.ops import InvariantOps
from samebits.kernels.cpu.plan import KEY_TILE, LINEAR_TILES
from samebits.model.rope_tables import rope_tables

ROW_COUNTS = (1, 2, 3, 7, 8, 16, 33, 64, 128)
HIDDEN, INTER, HEADS, KV_HEADS, HEAD_DIM, VOCAB = 576, 1536, 9, 3, 64, 49152


def _set_threads(n: int) -> None:
    torch.set_num_threads(n)
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))


@pytest.fixture(autouse=True)
def _restore_threads():
    old_torch, old_numba = torch.get_num_threads(), numba.get_num_threads()
    yield
    torch.set_num_threads(old_torch)
    numba.set_num_threads(old_numba)


@pytest.fixture
def every_call_parallel(monkeypatch):
    """The C kernels split every call between their threads, however small."""
    monkeypatch.setattr(sbgemm, "PARALLEL_MIN_MACS", 0)
    monkeypatch.setattr(sbrow, "PARALLEL_MIN_ELEMENTS", 0)


@pytest.fixture(params=[1, 2], ids=lambda t: f"threads{t}")
def threads(request, every_call_parallel) -> int:
    _set_threads(request.param)
    return request.param


@pytest.fixture(params=["sbgemm", "mkl-tiles"])
def kernel(request) -> str:
    return request.param


@pytest.fixture
def ops(kernel, threads) -> InvariantOps:
    """The configuration under test: `threads` threads for the C kernels."""
    return InvariantOps(LINEAR_TILES, KEY_TILE, kernel, num_threads=threads)


@pytest.fixture
def reference(kernel, ops) -> InvariantOps:
    """The configuration single rows run on (see the module docstring)."""
    if kernel == "sbgemm":
        return InvariantOps(LINEAR_TILES, KEY_TILE, kernel, num_threads=1)
    return ops


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


Op = Callable[[torch.Tensor], torch.Tensor]


def assert_row_invariant(
    make: Callable[[InvariantOps], Op], ops: InvariantOps, reference: InvariantOps,
    x: torch.Tensor,
) -> None:  # fmt: skip
    """make(ops) applied to the first M rows, for each M, matches make(reference) applied to
    single rows bit for bit."""
    single = make(reference)
    singles = torch.cat([single(x[r : r + 1]) for r in range(x.shape[0])])
    op = single if ops is reference else make(ops)
    for m in ROW_COUNTS:
        got = op(x[:m])
        assert same_bits(got, singles[:m]), f"M={m}: rows {differing_rows(got, singles[:m])}"


@pytest.mark.parametrize(
    "shape",
    [(HIDDEN, 3 * HIDDEN // 9 * 5), (HIDDEN, HIDDEN), (HIDDEN, 2 * INTER), (INTER, HIDDEN)],
    ids=lambda s: f"{s[0]}x{s[1]}",
)
def test_linear_row_invariant(kernel, ops, reference, shape):
    k, n = shape
    w, b = _rand(n, k, seed=1) * 0.05, _rand(n, seed=2)
    _assert_linear_invariant_or_refused(kernel, w, b, ops, reference, _rand(128, k))


def test_logits_linear_row_invariant(kernel, ops, reference):
    w = _rand(VOCAB, HIDDEN, seed=3) * 0.05
    _assert_linear_invariant_or_refused(kernel, w, None, ops, reference, _rand(128, HIDDEN))


def _assert_linear_invariant_or_refused(kernel, w, b, ops, reference, x) -> None:
    """The native kernel is row invariant by construction. The mkl-tiles kernel's invariance
    is the BLAS library's behaviour on this CPU, qualified at start-up (`qualify`, which
    `build_deployment` runs and fails on): where the probe passes, rows must be invariant;
    where it fails (the deployment is refused), rows must really differ: the probe is no
    false alarm."""
    check = lambda: assert_row_invariant(lambda o: o.linear(w, b), ops, reference, x)  # noqa: E731
    if kernel == "mkl-tiles" and not qualify(TiledLinear(w, b, LINEAR_TILES)):
        with pytest.raises(AssertionError, match="rows"):
            check()
        return
    check()


def test_rms_norm_row_invariant(ops, reference):
    w = _rand(HIDDEN, seed=4)

    def make(o: InvariantOps) -> Op:
        return lambda x: o.rms_norm(x.contiguous(), w, 1e-5)

    assert_row_invariant(make, ops, reference, _rand(128, HIDDEN))


def test_add_rms_norm_row_invariant(ops, reference):
    """Input rows carry [x | residual]; output rows are [normed | x + residual]."""
    w = _rand(HIDDEN, seed=5)

    def make(o: InvariantOps) -> Op:
        def op(xr):
            x, res = xr[:, :HIDDEN].clone(), xr[:, HIDDEN:].clone()
            normed, summed = o.add_rms_norm(x, res, w, 1e-5)
            return torch.cat([normed, summed], 1)

        return op

    assert_row_invariant(make, ops, reference, _rand(128, 2 * HIDDEN))


def test_silu_mul_row_invariant(ops, reference):
    def make(o: InvariantOps) -> Op:
        return lambda x: o.silu_mul(x.contiguous())

    assert_row_invariant(make, ops, reference, _rand(128, 2 * INTER) * 4)


def test_qk_norm_and_rope_row_invariant(ops, reference):
    """Input rows carry [position | q heads]; positions are exact small integers."""
    cos, sin = rope_tables(HEAD_DIM, 10000.0, None, 256)
    w = _rand(HEAD_DIM, seed=7)

    def make(o: InvariantOps) -> Op:
        def op(row):
            pos = row[:, 0].to(torch.int64).numpy()
            y = row[:, 1:].reshape(row.shape[0], HEADS, HEAD_DIM).clone()
            o.head_rms_norm(y, w, 1e-6)
            o.rope(y, SimpleNamespace(positions=pos), cos, sin)  # CPU rope reads .positions
            return y.reshape(row.shape[0], -1)

        return op

    positions = torch.randint(0, 256, (128, 1), generator=torch.Generator().manual_seed(8))
    x = torch.cat([positions.float(), _rand(128, HEADS * HEAD_DIM)], 1)
    assert_row_invariant(make, ops, reference, x)


def test_row_ops_independent_of_thread_count(kernel, every_call_parallel):
    """The row ops give the same bits on 1 and on 2 threads (the C kernels' pool with every
    call split, or numba's threads for the mkl-tiles plan's numba kernels)."""
    gate_up, x = _rand(64, 2 * INTER, seed=11) * 4, _rand(64, HIDDEN, seed=12)
    residual, w = _rand(64, HIDDEN, seed=13), _rand(HIDDEN, seed=14)
    results = []
    for t in (1, 2):
        _set_threads(t)
        o = InvariantOps(LINEAR_TILES, KEY_TILE, kernel, num_threads=t)
        normed, summed = o.add_rms_norm(x.clone(), residual.clone(), w, 1e-5)
        results.append([o.silu_mul(gate_up), o.rms_norm(x, w, 1e-5), normed, summed])
    names = ("silu_mul", "rms_norm", "add_rms_norm", "residual")
    for name, one, two in zip(names, *results, strict=True):
        assert same_bits(one, two), f"{name}: rows {differing_rows(one, two)}"


def test_sbgemm_is_thread_split_invariant_and_accurate(every_call_parallel):
    """The C kernel gives the same bits on 1 or 2 threads (every column split) and agrees with
    a float64 reference to float32 accuracy."""
    w, x = _rand(1000, HIDDEN, seed=9) * 0.05, _rand(37, HIDDEN, seed=10)
    one, two = sbgemm.SbLinear(w, None, 1)(x), sbgemm.SbLinear(w, None, 2)(x)
    assert same_bits(one, two), f"rows {differing_rows(one, two)}"
    ref = x.double() @ w.double().t()
    assert (one.double() - ref).abs().max().item() < 1e-4
