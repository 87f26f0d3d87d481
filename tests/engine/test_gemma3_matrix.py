"""The engine determinism matrix on Gemma 3 (CPU, bitwise against Ref): the tiny Gemma 3
checkpoint (sliding window 40) through every category plus the window scenarios (a needle
past the window in batches, chunked prefill with chunk edges on both sides of window edges, a
decode across the edge, a prefix-cache hit whose cached blocks lie partly below the window);
a random Gemma-3-shaped model (head_dim 256, window 48) through the long-context scenarios
(prompts of 700 and 1400 tokens: spans wholly below the window skipped); the fast plan is the
negative control."""

from __future__ import annotations

from samebits.deployment import build_deployment
from samebits.model import load_model
from samebits.model.random_init import random_model
from samebits.testing.determinism_matrix import (
    LONG,
    WINDOW,
    MatrixSize,
    build_scenarios,
    check_matrix,
    full_check,
    full_check_problems,
)


def test_matrix_tiny_gemma3(tiny_gemma3_text_dir, matrix_log):
    dep = build_deployment(load_model(tiny_gemma3_text_dir), "invariant")
    window = dep.config.gemma3.sliding_window
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=1, window=window)
    report, hits = full_check(dep, size)
    matrix_log(f"tiny-gemma3_text (window {window}): {report.summary()}")
    assert full_check_problems(report, hits) == []
    assert report.rows[WINDOW] >= 80


def test_negative_control_fast_plan_window(tiny_gemma3_text_dir, matrix_log):
    dep = build_deployment(load_model(tiny_gemma3_text_dir), "fast")
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=1, window=40)
    report = check_matrix(dep, [s for s in build_scenarios(size) if s.category == WINDOW])
    matrix_log(f"negative control (fast plan, tiny-gemma3_text, window): {report.summary()}")
    assert report.mismatches, "the fast plan was expected to break invariance"


def test_matrix_gemma3_long_contexts(matrix_log):
    dep = build_deployment(random_model("tiny-gemma3", seed=5), "invariant")
    size = MatrixSize(vocab=dep.config.vocab_size, repeats=1, long_prompts=(700, 1400))
    report = check_matrix(dep, [s for s in build_scenarios(size) if s.category == LONG])
    matrix_log(f"tiny-gemma3, long contexts: {report.summary()}")
    assert report.mismatches == []
    assert report.rows[LONG] >= 40 and report.preemptions > 0 and report.prefix_hits >= 1280
