"""A TP = 2 deployment's lifecycle on the CPU: `close()` stops the other rank (it exits 0);
a rank that dies makes the next step raise TensorParallelError on rank 0 naming it, quickly
(no hang), and every later call raises the same error."""

from __future__ import annotations

import time

import pytest

from samebits import LLM
from samebits.kernels.cpu import native
from samebits.parallel import TensorParallelError
from samebits.sampling import SamplingParams

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the native C kernels")


def _workers(llm: LLM):
    return llm.engine.deployment.model.workers.procs


def test_close_stops_the_ranks(tiny_tp_llama_dir):
    llm = LLM(str(tiny_tp_llama_dir), num_threads=1, tensor_parallel_size=2)
    procs = _workers(llm)
    assert llm.generate(["hello"], SamplingParams(max_tokens=2))[0].outputs[0].token_ids
    llm.close()
    assert [p.poll() for p in procs] == [0]
    llm.close()  # idempotent
    with pytest.raises(TensorParallelError, match="closed"):
        llm.generate(["hello"], SamplingParams(max_tokens=2))


def test_dead_rank_is_a_clear_error(tiny_tp_llama_dir):
    llm = LLM(str(tiny_tp_llama_dir), num_threads=1, tensor_parallel_size=2)
    try:
        (proc,) = _workers(llm)
        proc.kill()
        proc.wait(10)
        start = time.monotonic()
        with pytest.raises(TensorParallelError, match="rank 1 exited"):
            llm.generate(["hello"], SamplingParams(max_tokens=2))
        assert time.monotonic() - start < 30
        with pytest.raises(TensorParallelError, match="rank 1 exited"):
            llm.generate(["again"], SamplingParams(max_tokens=2))
    finally:
        llm.close()


def test_rank_failing_mid_forward_is_a_clear_error(tiny_tp_llama_dir, monkeypatch):
    """Rank 1 fails inside a forward (it is sent a KV cache id it never allocated) while rank
    0 waits in the forward's all-gather: the collective fails, rank 0 raises naming rank 1
    with its traceback, within the wait (no hang until the collective timeout)."""
    from samebits.engine.runner import cold_logits
    from samebits.parallel.model import TensorParallelModel

    llm = LLM(str(tiny_tp_llama_dir), num_threads=1, tensor_parallel_size=2)
    try:
        real = TensorParallelModel.new_kv_cache

        def unknown_cache(self, num_slots):
            kv = real(self, num_slots)
            kv.tp_cache_id = 10**6
            return kv

        monkeypatch.setattr(TensorParallelModel, "new_kv_cache", unknown_cache)
        start = time.monotonic()
        with pytest.raises(TensorParallelError, match=r"rank 1 exited(.|\n)*KeyError"):
            cold_logits(llm.engine.deployment, [1, 2, 3])
        assert time.monotonic() - start < 60
    finally:
        llm.close()
