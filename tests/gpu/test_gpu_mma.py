"""The H200's bf16 tensor-core chain equals the CPU emulator (kernels/cpu/mma_emu.py): the
qualification probe's committed vectors, and a short sweep of every input class at K 16, 256
and 4096 (the long run is benchmarks/mma_validate.py)."""

from __future__ import annotations

import numpy as np
import pytest

from samebits.kernels.cpu import mma_cases, mma_emu

pytestmark = pytest.mark.gpu


def test_probe_vectors_qualify(cuda, gpu_record):
    from samebits.kernels.triton import mma_probe

    report = mma_probe.qualify()
    gpu_record("mma probe mismatches by class", report.mismatches)
    assert report.outputs > 0 and report.passed, report.mismatches


@pytest.mark.parametrize("config", [(64, 4), (16, 4)])  # wgmma, mma.sync
@pytest.mark.parametrize("k", [16, 256, 4096])
def test_chain_equals_emulator_on_every_class(cuda, gpu_record, k, config):
    import torch

    from samebits.kernels.triton import mma_probe

    bad = {}
    for i, kind in enumerate(sorted(mma_cases.KINDS)):
        x, w, acc = mma_cases.make_case(kind, 128, 192, k, np.random.default_rng([k, i]))
        t = [torch.from_numpy(a.view(d)).cuda() for a, d in ((x, np.int16), (w, np.int16),
                                                             (acc, np.int32))]  # fmt: skip
        y = mma_probe.chain_bits(*t, block_m=config[0], num_warps=config[1])
        gpu = y.cpu().numpy().view(np.uint32)
        bad[kind] = int((gpu != mma_emu.chain_bits(x, w, acc)).sum())
    gpu_record(f"mma chain K={k} BLOCK_M={config[0]} mismatches by class (128x192 each)", bad)
    assert not any(bad.values()), bad


def test_a_cuda_deployment_records_a_passing_probe(cuda, gpu_record, tiny_llama_dir):
    """build_deployment runs the probe at start-up: the fingerprint records it with the
    machine, and a passing probe leaves the numerics id the CPU replay computes."""
    from samebits.deployment import build_deployment
    from samebits.kernels.fingerprint import numerics_id
    from samebits.model import load_model

    dep = build_deployment(load_model(tiny_llama_dir), "invariant", device="cuda")
    probe = dep.components["mma_probe"]
    gpu_record("deployment mma probe", probe)
    assert probe["status"] == "equal" and probe["outputs"] > 0
    without = {k: v for k, v in dep.components.items() if k != "mma_probe"}
    assert numerics_id(without) == dep.numerics_id
