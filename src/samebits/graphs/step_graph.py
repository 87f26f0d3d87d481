"""A captured step function: `capture(fn)` once, then `replay()` any number of times.

Two implementations of one small interface, so the graph runner's logic (buckets, static
buffers, padding, fallbacks) runs the same on a GPU and in CPU tests:

- `CudaStepGraph`: a `torch.cuda.CUDAGraph`. `fn` is run a few times on a side stream first
  (compiles and loads every kernel, sets up cuBLAS workspaces: nothing may be loaded during
  capture), then captured once. A replay re-launches the recorded kernels with the recorded
  arguments: the same pointers (the static buffers, the pool's activations, the TMA
  descriptors built at capture from them) and the same launch parameters as the capture.
- `EagerStepGraph`: the stand-in used on the CPU: `replay()` calls `fn` again. `fn` reads
  only the static buffers, exactly like the recorded graph, so tests of the runner exercise
  the same data flow (what is written where before a replay, what is read back after).

Invariant shared by both: `replay()` returns the tensor `fn` returned at capture (same
storage), holding the result computed from the static buffers' contents at replay time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

StepFn = Callable[[], torch.Tensor]
WARMUP_RUNS = 2


class StepGraph(Protocol):
    def capture(self, fn: StepFn) -> torch.Tensor:
        """Record `fn` (runs it); returns its output tensor."""

    def replay(self) -> torch.Tensor:
        """Run the recorded work again; returns the same output tensor, recomputed."""


class EagerStepGraph:
    """CPU stand-in: the captured function itself, called at every replay."""

    def __init__(self) -> None:
        self._fn: StepFn | None = None
        self._out: torch.Tensor | None = None

    def capture(self, fn: StepFn) -> torch.Tensor:
        self._fn = fn
        self._out = fn()
        return self._out

    def replay(self) -> torch.Tensor:
        if self._fn is None or self._out is None:
            raise RuntimeError("replay() before capture()")
        with torch.inference_mode():
            self._out.copy_(self._fn())  # the same storage, as a real graph's output
        return self._out


class CudaStepGraph:
    """A CUDA graph of `fn`; graphs built with the same `pool` share its memory (they are
    replayed one at a time, and a replay's output is read before the next replay)."""

    def __init__(self, pool) -> None:
        self._graph = torch.cuda.CUDAGraph()
        self._pool = pool
        self._out: torch.Tensor | None = None

    def capture(self, fn: StepFn) -> torch.Tensor:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(WARMUP_RUNS):
                fn()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        with torch.cuda.graph(self._graph, pool=self._pool):
            self._out = fn()
        return self._out

    def replay(self) -> torch.Tensor:
        if self._out is None:
            raise RuntimeError("replay() before capture()")
        self._graph.replay()
        return self._out


def step_graph_factory(device: torch.device) -> Callable[[], StepGraph]:
    """New graphs for `device`: CUDA graphs sharing one memory pool, or the CPU stand-in."""
    if device.type == "cuda":
        pool = torch.cuda.graph_pool_handle()
        return lambda: CudaStepGraph(pool)
    return EagerStepGraph
