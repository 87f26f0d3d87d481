"""The exponent floor of the MMA step (docs/mma_emulator.md): chains that start from a zero
accumulator on products below 2^-126 (the K = 64 linears' first step) as the H200 computed
them (benchmarks/mma_zero_acc_capture.py, 2026-12-03): every output equals the reference
model and the native emulator, bit for bit; without the floor 173 of the K = 16 outputs differ
(the test fails when the floor is removed or moved by one)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from samebits.kernels.cpu import mma_cases, mma_emu, mma_model

DATA = Path(__file__).parent / "data"
CAPTURE = json.loads((DATA / "h200-zero-acc-capture.json").read_text())["sha256"]
KS = (16, 32, 64, 128, 256)


def _case(k: int):
    x, w, _ = mma_cases.make_case("subnormal_out", 256, 256, k, np.random.default_rng([7, k]))
    return x, w


def _sha(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, np.uint32).tobytes()).hexdigest()


@pytest.mark.parametrize("k", KS)
@pytest.mark.parametrize(("sign", "word"), [("pos", 0), ("neg", 0x80000000)])
def test_native_chain_from_a_zero_accumulator_is_the_h200s(k, sign, word):
    x, w = _case(k)
    acc = np.full((256, 256), word, np.uint32)
    assert _sha(mma_emu.chain_bits(x, w, acc)) == CAPTURE[f"gpu|{k}|{sign}|bm64"]


def test_reference_model_matches_the_captured_k16_words():
    data = np.load(DATA / "h200-zero-acc-k16.npz")
    x, w = _case(16)
    for sign, word in (("pos", 0), ("neg", 0x80000000)):
        gpu = data[f"gpu|16|{sign}|bm64"]
        acc = np.full((256, 256), word, np.uint32)
        assert np.array_equal(mma_model.mma_chain(x, w, acc), gpu)
        assert np.array_equal(mma_emu.chain_bits(x, w, acc), gpu)


@pytest.mark.parametrize("floor", [mma_model.EMAX_FLOOR - 1, mma_model.EMAX_FLOOR + 1, -100_000])
def test_another_floor_misses_the_capture(monkeypatch, floor):
    """The capture decides the floor: one exponent lower, higher, or none gives other bits."""
    monkeypatch.setattr(mma_model, "EMAX_FLOOR", floor)
    gpu = np.load(DATA / "h200-zero-acc-k16.npz")["gpu|16|pos|bm64"]
    x, w = _case(16)
    wrong = int((mma_model.mma_chain(x, w, np.zeros((256, 256), np.uint32)) != gpu).sum())
    assert wrong > 0


@pytest.mark.parametrize(("role", "n"), [("qkv", 128), ("lm_head", 320)])
def test_the_k64_linears_partials_are_the_h200s(role, n):
    """The cells tests/gpu/test_gpu_replay.py found differing (RESULTS.md 2026-12-02)."""
    from samebits.kernels.replay import ReplayLinear
    from samebits.kernels.splitplan import split_plan

    i = sorted(mma_cases.KINDS).index("subnormal_out")
    x, w, _ = mma_cases.make_case("subnormal_out", 130, n, 64, np.random.default_rng([n, 64, i]))
    gpu = np.load(DATA / "h200-zero-acc-k16.npz")[f"partials|{role}{n}"]
    assert np.array_equal(ReplayLinear(w, None, split_plan(n, 64, role)).partials(x), gpu)
