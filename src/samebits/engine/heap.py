"""Python garbage collection around an engine: the heap alive at start-up is frozen.

A full (generation 2) collection walks every object the collector tracks. After the imports,
the model and the tokenizer that is a large, long-lived heap, and each full collection during
serving stalled the step it fell in: measured on the H200 host (2026-12-01, workload (a) of
`benchmarks/gpu_serving.py`, `gc_pauses_ms`): 1-2 full collections per run of 110-160 ms
each. `gc.freeze()` moves the objects alive when an engine is ready to the permanent
generation, which collections skip; what serving allocates later is collected as before.
"""

from __future__ import annotations

import gc


def freeze_startup_heap() -> None:
    """Collect, then freeze every object alive now (called when an engine is built). What an
    earlier engine froze is unfrozen first, so an engine that was dropped is collected here
    instead of staying in the permanent generation."""
    collect_all()
    gc.freeze()


def collect_all() -> None:
    """A full collection that includes frozen objects (they are unfrozen): what frees the
    device memory of engines that were dropped, before free memory is measured."""
    gc.unfreeze()
    gc.collect()
