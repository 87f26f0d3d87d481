"""The prefill probe's interior-tile variant (`benchmarks/prefill_probe.py`, the next step for
the prefill's speed, issue 25) gives the shipped kernel's bits (CPU interpreter, fp32): whole
prompts, two requests, chunks after cached keys, sliding windows, both tile heights."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from test_triton_attention import SCALE, make_cache, make_request
from triton_bits import same_bits

from samebits.kernels.triton.attention import attention_metadata, paged_attention

PROBE = Path(__file__).resolve().parents[3] / "benchmarks" / "prefill_probe.py"


@pytest.fixture(scope="module")
def probe():
    spec = importlib.util.spec_from_file_location("prefill_probe", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def case():
    reqs = [make_request(300, 4, seed=70), make_request(140, 4, seed=71)]
    return reqs, make_cache(reqs, 16, seed=8)


@pytest.mark.parametrize(
    ("chunks", "window", "block_m"),
    [([(0, 0, 300), (1, 0, 140)], 0, None), ([(0, 200, 300), (1, 100, 140)], 0, 16),
     ([(0, 150, 300)], 100, None)],
)  # fmt: skip
def test_interior_tiles_give_the_shipped_bits(probe, case, chunks, window, block_m):
    reqs, cache = case
    q = torch.cat([reqs[r].q[a:b] for r, a, b in chunks]).contiguous()
    positions = np.concatenate([np.arange(a, b) for _, a, b in chunks])
    qsl = np.cumsum([0] + [b - a for _, a, b in chunks])
    group = q.shape[1] // reqs[0].k.shape[1]
    meta = attention_metadata(positions, qsl, cache.tables[[r for r, _, _ in chunks]],
                              cache.block_size, group, "cpu", block_m, span=128)  # fmt: skip
    shipped = paged_attention(q, cache.k, cache.v, meta, SCALE, window=window)
    assert same_bits(probe.launch_interior(q, cache.k, cache.v, meta, SCALE, window), shipped)
