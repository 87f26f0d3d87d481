"""The C worker pool (sbpool.c): results never depend on how chunks were claimed, concurrent
callers are serialised safely, more threads than cores and a forked child both work."""

from __future__ import annotations

import os
import signal
import threading

import pytest
import torch

from samebits.bits import same_bits
from samebits.kernels.cpu import sbgemm


@pytest.fixture(autouse=True)
def _always_parallel(monkeypatch):
    monkeypatch.setattr(sbgemm, "PARALLEL_MIN_MACS", 0)


def _case(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    n = int(torch.randint(1, 700, (1,), generator=gen))
    rows = int(torch.randint(1, 40, (1,), generator=gen))
    return torch.randn(n, 96, generator=gen), torch.randn(rows, 96, generator=gen)


def test_many_shapes_and_thread_counts_match_one_thread():
    for seed in range(40):
        w, x = _case(seed)
        expected = sbgemm.SbLinear(w, None, 1)(x)
        for threads in (2, 3, 5, 9):
            assert same_bits(sbgemm.SbLinear(w, None, threads)(x), expected), (seed, threads)


def test_concurrent_callers_from_python_threads():
    cases = [_case(100 + i) for i in range(6)]
    expected = [sbgemm.SbLinear(w, None, 1)(x) for w, x in cases]
    errors: list[str] = []

    def hammer(worker: int) -> None:
        for rep in range(30):
            i = (worker + rep) % len(cases)
            w, x = cases[i]
            if not same_bits(sbgemm.SbLinear(w, None, 2 + worker % 2)(x), expected[i]):
                errors.append(f"thread {worker} case {i}")

    threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and errors == []


def test_forked_child_gets_a_working_pool():
    """A child forked after the parent's workers started runs threaded kernels (it starts
    with no workers and makes its own) and gets the same bits."""
    w, x = _case(7)
    expected = sbgemm.SbLinear(w, None, 2)(x)  # the parent's workers exist now
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # child: compute, send the bytes, leave without running pytest's teardown
        os.close(read_end)
        signal.alarm(60)  # a hung child dies, the parent's read ends, the test fails
        status = 1
        try:
            data = sbgemm.SbLinear(w, None, 2)(x).numpy().tobytes()
            with os.fdopen(write_end, "wb") as pipe:
                pipe.write(data)
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        data = pipe.read()
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0
    assert data == expected.numpy().tobytes()
