"""The engine determinism matrix on the GPU invariant plan (Triton, bfloat16): tiny models of
every architecture and random-weight Llama-3-8B / Qwen3-8B-shaped models, every case ending
in the spec's predicate against Ref; the stock-torch CUDA plan is the negative control."""

from __future__ import annotations

import dataclasses

import pytest

from samebits.deployment import build_deployment
from samebits.model import load_model
from samebits.testing.determinism_matrix import (
    MatrixSize,
    build_scenarios,
    check_matrix,
    full_check,
    full_check_problems,
)

pytestmark = pytest.mark.gpu
PAGE = 16  # the smallest KV page the attention certificates cover (the gate refuses 4)
BIG = MatrixSize(vocab=0, n_out=8, batch_sizes=(2, 7, 16, 64), repeats=1, small_block=PAGE)


def _random(preset: str):
    import torch

    from samebits.model.random_init import random_model

    return random_model(preset, seed=0, device="cuda", dtype=torch.bfloat16)


def _deployment(loaded, plan: str = "invariant"):
    return build_deployment(loaded, plan, release_sources=True, device="cuda")


def _check(dep, size: MatrixSize, label: str, gpu_record) -> None:
    report, hits = full_check(dep, size)
    gpu_record(f"matrix {label}", report.summary())
    assert full_check_problems(report, hits) == []
    assert report.total_rows >= 784


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3", "mistral"])
def test_gpu_matrix_tiny_checkpoints(request, cuda, arch, gpu_record):
    dep = _deployment(load_model(request.getfixturevalue(f"tiny_{arch}_dir")))
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=2, small_block=PAGE)
    _check(dep, size, f"tiny-{arch}", gpu_record)


@pytest.mark.parametrize("preset", ["llama-3-8b", "qwen3-8b"])
def test_gpu_matrix_8b_shaped(cuda, preset, gpu_record):
    dep = _deployment(_random(preset))
    size = dataclasses.replace(BIG, vocab=dep.config.vocab_size)
    _check(dep, size, f"random {preset} bf16", gpu_record)


def test_gpu_negative_control_fast_plan(cuda, gpu_record):
    dep = _deployment(_random("llama-3-8b"), "fast")
    size = dataclasses.replace(BIG, vocab=dep.config.vocab_size)
    report = check_matrix(dep, [s for s in build_scenarios(size) if s.category == "batch"])
    gpu_record("negative control (cuda fast plan, batch category)", report.summary())
    assert report.mismatches, "the stock-torch CUDA plan was expected to break batch invariance"


@pytest.mark.parametrize(
    ("preset", "lengths"), [("tiny-qwen3", (700, 1400)), ("llama-3-8b", (8200, 32800))]
)
def test_gpu_matrix_long_contexts(cuda, preset, lengths, gpu_record):
    """Contexts up to 32k: chunk budgets around a span, batches (split-KV decode), a prefix
    hit ending mid-span, preemption of long requests (category long of the matrix)."""
    from samebits.testing.determinism_matrix import LONG

    dep = _deployment(_random(preset))
    size = dataclasses.replace(BIG, vocab=dep.config.vocab_size, long_prompts=lengths)
    report = check_matrix(dep, [s for s in build_scenarios(size) if s.category == LONG])
    gpu_record(f"matrix long contexts {preset} {lengths}", report.summary())
    assert report.mismatches == []
    assert report.rows[LONG] >= 40 and report.preemptions > 0 and report.prefix_hits >= 1280
