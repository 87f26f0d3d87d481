"""An engine freezes the heap alive when it is built (`gc.freeze`), so no serving step pays a
full collection of the start-up heap; `collect_all` still frees an engine that was dropped."""

from __future__ import annotations

import gc
import weakref

from samebits.engine.engine import LLMEngine
from samebits.engine.heap import collect_all


def _engine(path) -> LLMEngine:
    return LLMEngine.from_args(str(path), max_num_seqs=2, num_kv_blocks=16, block_size=4)


def test_engine_freezes_its_heap_and_a_dropped_engine_is_still_freed(tiny_llama_dir):
    engine = _engine(tiny_llama_dir)
    assert gc.get_freeze_count() > 0
    model = weakref.ref(engine.deployment.model)
    del engine
    collect_all()
    assert model() is None
    assert gc.get_freeze_count() == 0
