"""benchmarks/mma_validate.py (run on the H200): its default plan covers every input class at
every K from 16 to 4096 with >= 1e8 dot products, and its mismatch classes are right."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from samebits.kernels.cpu import mma_cases

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "mma_validate.py"


def _module():
    spec = importlib.util.spec_from_file_location("mma_validate", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["mma_validate"] = module
    spec.loader.exec_module(module)
    return module


def test_default_plan_covers_every_class_and_k():
    mv = _module()
    cells = mv.plan(1e9, 4)
    assert {(kind, k) for _, kind, k, _ in cells} == {
        (kind, k) for kind in mma_cases.KINDS for k, _ in mv.K_PLAN
    }
    assert min(k for k, _ in mv.K_PLAN) == 16 and max(k for k, _ in mv.K_PLAN) == 4096
    assert sum(size * size for *_, size in cells) >= 1e8
    assert all(size % 64 == 0 for *_, size in cells)


def test_mismatch_classes():
    mv = _module()
    pairs = [
        (0x7FC00000, 0x7FFFFFFF, "nan_payload"),
        (0x7FFFFFFF, 0x3F800000, "nan_vs_value"),
        (0x7F800000, 0x7F7FFFFF, "inf_vs_finite"),
        (0x80000000, 0x00000000, "zero_sign"),
        (0x00000004, 0x00000000, "subnormal_or_zero"),
        (0xBF800000, 0x3F800000, "sign"),
        (0x3F800001, 0x3F800000, "ulp1"),
        (0x3F800009, 0x3F800000, "ulp<=16"),
        (0x40000000, 0x3F800000, "other"),
    ]
    for gpu, emu, name in pairs:
        got = mv.classify(np.array([gpu], np.uint32), np.array([emu], np.uint32))
        assert got == {name: 1}, (hex(gpu), hex(emu), got)
