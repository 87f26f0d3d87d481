"""The pure helpers of benchmarks/replay_linear_check.py (the GPU script itself runs on the
H200): replayed columns, bit comparison, PTX/SASS instruction counts."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "replay_linear_check.py"
_spec = importlib.util.spec_from_file_location("replay_linear_check", _PATH)
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)

PTX = """
    ex2.approx.f32 %f3, %f2;
    ex2.approx.ftz.f32 %f4, %f3;
    rsqrt.approx.ftz.f32 %f5, %f4;
    div.full.f32 %f6, %f5, %f4;
    div.rn.f32 %f7, %f5, %f4;
    fma.rn.f32 %f8, %f1, %f2, %f3;
    mul.f32 %f9, %f1, %f2;
    add.f32 %f10, %f9, %f3;
    add.s32 %r1, %r2, %r3;
    mad.lo.s32 %r4, %r1, %r2, %r3;
    cvt.rn.bf16x2.f32 %r5, %f1, %f2;
    wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {...};
"""


def test_ptx_counts():
    got = check._count(PTX, check.PTX_PATTERNS)
    assert got == {
        "ex2.approx": 2, "rsqrt.approx": 1, "div.full": 1, "div.rn.f32": 1, "fma.f32": 1,
        "mul.f32": 1, "add.f32": 1, "ftz": 2, "cvt.bf16.f32": 1, "wgmma": 1,
    }  # fmt: skip


def test_sass_counts():
    sass = "MUFU.EX2 R1, R2 ;\nFFMA R3, R1, R2, R3 ;\nFFMA.FTZ R4, R1, R2, R3 ;\nHGMMA.64x64x16"
    assert check._count(sass, check.SASS_PATTERNS) == {"MUFU.EX2": 1, "FFMA": 2, "HGMMA": 1}


def test_columns_keep_both_edges():
    assert check._columns(100, 4096).tolist() == list(range(100))
    cols = check._columns(10_000, 8)
    assert cols.tolist() == [0, 1, 2, 3, 9996, 9997, 9998, 9999]


def test_compare_counts_bits():
    a = np.array([[0, 0x8000], [1, 2]], np.uint16)
    b = np.array([[0, 0], [1, 3]], np.uint16)  # -0 vs +0 is a mismatch
    got = check._compare(a, b)
    assert (got["outputs"], got["mismatches"]) == (4, 2)
    assert got["examples"][0] == {"row": 0, "col": 1, "gpu": "0x8000", "cpu": "0x0"}
