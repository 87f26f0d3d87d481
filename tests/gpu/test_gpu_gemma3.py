"""Gemma 3 on the GPU invariant plan (Triton, bfloat16): the tiny Gemma 3 checkpoint (sliding
window 40) through the determinism matrix with the window scenarios, and a random
Gemma-3-12B-shaped model (window 1024, head_dim 256) through the window scenarios at its own
window and the long-context ones (prompts of 1100 and 2600 tokens: past the window and several
spans), every case bitwise against Ref; the tiny checkpoint agrees with transformers in
float32 on the GPU's stock-torch plan (the same decoder code, SDPA with the window mask) and
the invariant plan's greedy tokens follow HF's bf16 ones for most steps; the stock-torch CUDA
plan is the negative control."""

from __future__ import annotations

import pytest

from samebits.deployment import build_deployment
from samebits.model import load_model
from samebits.testing.determinism_matrix import (
    LONG,
    WINDOW,
    MatrixSize,
    build_scenarios,
    check_matrix,
    full_check,
    full_check_problems,
)

pytestmark = pytest.mark.gpu
PAGE = 16  # the smallest KV page the attention certificates cover


def _deployment(loaded, plan: str = "invariant"):
    return build_deployment(loaded, plan, release_sources=True, device="cuda")


def _random_12b():
    import torch

    from samebits.model.random_init import random_model

    return random_model("gemma-3-12b", seed=0, device="cuda", dtype=torch.bfloat16)


def test_gpu_matrix_tiny_gemma3(cuda, tiny_gemma3_text_dir, gpu_record):
    dep = _deployment(load_model(tiny_gemma3_text_dir))
    window = dep.config.gemma3.sliding_window
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=1, small_block=PAGE, window=window)
    report, hits = full_check(dep, size)
    gpu_record("matrix tiny-gemma3_text (window 40)", report.summary())
    assert full_check_problems(report, hits) == []
    assert report.rows[WINDOW] >= 80


def _uncertified(cfg) -> list[str]:
    """The model's certification units without a valid certificate in the gate's directory."""
    from samebits.kernels.triton.certified import gate, units

    problems = gate.check(units.units_for(units.dims_of(cfg)), gate.certificate_dir())["units"]
    return sorted(k for k, p in problems.items() if p is not None)


def test_gpu_matrix_gemma3_12b_shaped(cuda, gpu_record, monkeypatch):
    """gemma-3-12b is not in the shipped certificate set (`samebits certify --model
    gemma-3-12b --out DIR`, then SAMEBITS_CERTIFICATES=DIR); without its certificates the run
    opts out of the gate, loudly, and records which units were uncertified."""
    loaded = _random_12b()
    missing = _uncertified(loaded.config)
    gpu_record("gemma-3-12b uncertified units", missing)
    if missing:
        monkeypatch.setenv("SAMEBITS_ALLOW_UNCERTIFIED", "1")
    dep = _deployment(loaded)
    window = dep.config.gemma3.sliding_window
    size = MatrixSize(vocab=dep.config.vocab_size, n_out=4, repeats=1, small_block=PAGE,
                      window=window, long_prompts=(1100, 2600))  # fmt: skip
    scenarios = [s for s in build_scenarios(size) if s.category in (WINDOW, LONG)]
    report = check_matrix(dep, scenarios)
    gpu_record("matrix random gemma-3-12b bf16 (window, long)", report.summary())
    assert report.mismatches == []
    assert report.rows[WINDOW] >= 80 and report.rows[LONG] >= 40


def test_gpu_negative_control_fast_plan_gemma3(cuda, tiny_gemma3_text_dir, gpu_record):
    dep = _deployment(load_model(tiny_gemma3_text_dir), "fast")
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=1, small_block=PAGE, window=40)
    report = check_matrix(dep, [s for s in build_scenarios(size) if s.category == WINDOW])
    gpu_record("negative control (cuda fast plan, tiny gemma3, window)", report.summary())
    assert report.mismatches, "the stock-torch CUDA plan was expected to break invariance"


def test_gpu_tiny_gemma3_agrees_with_transformers(cuda, tiny_gemma3_text_dir, gpu_record):
    """float32 on the GPU: our decoder on the stock-torch CUDA plan (fp32, SDPA with the
    window mask) against HF fp32 at every position of a 300-token prompt."""
    import torch
    from transformers import AutoModelForCausalLM

    from samebits.engine.runner import cold_logits

    hf = AutoModelForCausalLM.from_pretrained(tiny_gemma3_text_dir, dtype=torch.float32).eval()
    dep = build_deployment(load_model(tiny_gemma3_text_dir), "fast", device="cuda",
                           dtype="float32")  # fmt: skip
    ids = torch.randint(0, 320, (300,), generator=torch.Generator().manual_seed(0)).tolist()
    ours = torch.from_numpy(cold_logits(dep, ids, all_rows=True))
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float()
    rel = float((ours - ref).abs().max() / ref.abs().max())
    gpu_record("tiny gemma3 cuda fp32 vs HF fp32 (relative max error)", rel)
    assert rel <= 1e-4
