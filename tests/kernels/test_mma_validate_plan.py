"""benchmarks/mma_validate.py (run on the H200): its default plan covers every input class at
every K from 16 to 4096 with >= 1e8 dot products, and its mismatch classes are right."""

from __future__ import annotations

import importlib.util
import json
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


def test_a_run_names_the_switch_a_different_gpu_would_need(tmp_path, monkeypatch):
    """mma_validate.py with a stand-in 'GPU' that signs its zeros, then
    mma_mismatch_replay.py on its output: the zeros class fails, signed_zeros explains it."""
    from samebits.kernels.cpu import mma_emu
    from samebits.kernels.cpu.mma_model import MmaModel

    mv = _module()
    spec = importlib.util.spec_from_file_location(
        "replay", SCRIPT.with_name("mma_mismatch_replay.py")
    )
    replay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay)
    alt = MmaModel(signed_zeros=True)
    monkeypatch.setattr(
        mv, "gpu_chain", lambda x, w, acc, config: mma_emu.chain_bits(x, w, acc, alt)
    )
    monkeypatch.setattr(mv, "environment", lambda: {"gpu": "stand-in"})
    monkeypatch.setattr(mv, "probe_result", lambda: {"passed": True})
    monkeypatch.setattr(mv, "K_PLAN", ((16, 1.0), (48, 1.0)))
    out = tmp_path / "run.json"
    monkeypatch.setattr(sys, "argv", ["mma_validate", "--out", str(out), "--dots", "1e5",
                                      "--rounds", "1", "--threads", "2"])  # fmt: skip
    assert mv.main() == 1
    run = json.loads(out.read_text())
    failing = {c["kind"] for c in run["cells"] if c["mismatches"]}
    assert failing == {"zeros"} and set(run["summary"]["by_class"]) == {"zero_sign"}
    saved = np.load(out.with_name("run_mismatches.npz"))
    for cell in (c for c in run["cells"] if c["mismatches"]):
        assert cell["variants"]["signed_zeros"] == 0
        result = replay.replay(cell, saved)
        assert result["emulator_reproduced"] and result["explained"]["default"] == 0
        assert result["explained"]["signed_zeros"] == result["saved"] > 0
