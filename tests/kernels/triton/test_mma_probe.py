"""The MMA qualification probe (kernels/triton/mma_probe.py): its committed vectors are the
emulator's bits for every input class and they regenerate identically from their seeds. The
chain kernel itself runs only on the GPU (tests/gpu/test_gpu_mma.py): Triton's interpreter
reads bf16 operands as integers (bf16 loads and bitcasts both measured wrong here)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from samebits.kernels.cpu import mma_cases, mma_emu, mma_model
from samebits.kernels.triton import mma_probe


def _kinds(vectors):
    return sorted({key.rsplit("_", 1)[0] for key in vectors})


def test_probe_covers_every_input_class():
    vectors = mma_probe.load_vectors()
    assert _kinds(vectors) == sorted(mma_cases.KINDS)
    y = np.concatenate([vectors[f"{k}_y"].ravel() for k in _kinds(vectors)])
    f = y.view(np.float32)
    assert np.isnan(f).any() and np.isinf(f).any()
    assert (y == 0).any()
    assert ((y & 0x7F800000) == 0).sum() > (f == 0).sum()  # subnormal results


def test_committed_vectors_are_the_emulators_bits():
    vectors = mma_probe.load_vectors()
    for kind in _kinds(vectors):
        x, w, acc = (vectors[f"{kind}_{p}"] for p in ("x", "w", "acc"))
        assert np.array_equal(mma_model.mma_chain(x, w, acc), vectors[f"{kind}_y"]), kind
        assert np.array_equal(mma_emu.chain_bits(x, w, acc), vectors[f"{kind}_y"]), kind


def test_vectors_regenerate_from_their_seeds():
    committed, fresh = mma_probe.load_vectors(), mma_probe.make_vectors()
    assert sorted(committed) == sorted(fresh)
    for key, value in fresh.items():
        assert value.dtype == committed[key].dtype and np.array_equal(value, committed[key]), key


def test_chain_bits_rejects_bad_shapes():
    x = torch.zeros((2, 24), dtype=torch.int16)
    with pytest.raises(ValueError, match="K % 16"):
        mma_probe.chain_bits(x, x, torch.zeros((2, 2), dtype=torch.int32))


def test_probe_component_records_the_outcome():
    """What a GPU deployment's fingerprint records (the probe itself runs on the GPU only)."""
    ok = mma_probe.ProbeReport(3072, {"normal": 0, "zeros": 0})
    bad = mma_probe.ProbeReport(3072, {"normal": 2, "zeros": 1})
    assert mma_probe.probe_component(lambda: ok) == {
        "vectors_sha256": mma_probe.vectors_sha256(), "outputs": 3072, "mismatches": 0,
        "status": "equal"}  # fmt: skip
    assert mma_probe.probe_component(lambda: bad)["status"] == "differs"
    assert mma_probe.probe_component(lambda: bad)["mismatches"] == 3

    def broken():
        raise RuntimeError("no GPU")

    assert mma_probe.probe_component(broken)["status"] == "error: RuntimeError: no GPU"
