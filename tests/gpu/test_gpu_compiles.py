"""No Triton kernel compiles in the middle of serving because a step's token or row count
changed parity: the runner's device views of a step's int64 arrays stay 16-byte aligned, so
the pointer specializations seen after a warm-up are the only ones (before 2026-12-01 an odd
count moved the slot and position views to 8-byte offsets: a ~170 ms compile mid-run)."""

from __future__ import annotations

import pytest

from samebits import LLM, SamplingParams
from samebits.kernels.triton.compiles import compile_log

pytestmark = pytest.mark.gpu


def _generate(llm, prompts: int, length: int) -> None:
    params = SamplingParams(max_tokens=3, temperature=0.0, ignore_eos=True)
    llm.generate([[7 + (i + t) % 50 for t in range(length)] for i in range(prompts)], params)


def test_no_compiles_when_counts_change_parity(cuda, tiny_llama_dir, gpu_record):
    llm = LLM(str(tiny_llama_dir), device="cuda", gpu_memory_utilization=0.3)
    _generate(llm, prompts=2, length=20)  # warm-up: 40 tokens and 2 rows per prompt step
    llm.reset_prefix_cache()
    with compile_log() as compiled:
        _generate(llm, prompts=3, length=13)  # 39 tokens, 3 rows: the same launch rows
        llm.reset_prefix_cache()
        _generate(llm, prompts=1, length=21)  # 21 tokens, 1 row
    gpu_record("compiles after warm-up (odd token / row counts)", compiled)
    assert compiled == []
