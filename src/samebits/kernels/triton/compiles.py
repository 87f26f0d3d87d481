"""Which Triton kernels compile while a block of code runs (a diagnostic, not a launch path).

A compile in the middle of serving stalls that step for 0.1-9 s on the H200 (a specialization
Triton had not seen: a pointer's 16-byte alignment, an integer equal to 1 or divisible by 16).
Tests and benchmarks wrap their timed part in `compile_log()` and expect it to stay empty.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def compile_log() -> Iterator[list[str]]:
    """Yields a list that collects, in order, the specialization Triton prints for each kernel
    compiled (or loaded from Triton's disk cache) while the block runs; an earlier hook is kept
    and still called."""
    import triton

    compiled: list[str] = []
    previous = triton.knobs.runtime.jit_cache_hook

    def hook(**kwargs):
        compiled.append(str(kwargs.get("repr", "?")))
        return previous(**kwargs) if previous else None

    triton.knobs.runtime.jit_cache_hook = hook
    try:
        yield compiled
    finally:
        triton.knobs.runtime.jit_cache_hook = previous
