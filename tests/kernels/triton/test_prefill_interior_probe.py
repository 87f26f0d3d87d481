"""The prefill probe's interior-tile variant (`benchmarks/prefill_probe.py`, the next step for
the prefill's speed, issue 25) gives the shipped kernel's bits (CPU interpreter, fp32): whole
prompts, two requests, chunks after cached keys, sliding windows, both tile heights; with its
lean exponential too, which equals `softexp2` bit for bit on every x <= 0 it was run on (every
fp32 in [-151, -120], where results are subnormal or 0, and samples elsewhere)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from test_triton_attention import SCALE, make_cache, make_request
from triton.runtime import interpreter
from triton.runtime.interpreter import TensorHandle
from triton_bits import same_bits

from samebits.kernels.replay.softexp import fma_f32, softexp2
from samebits.kernels.triton.attention import attention_metadata, paged_attention

PROBE = Path(__file__).resolve().parents[3] / "benchmarks" / "prefill_probe.py"


def _load():
    spec = importlib.util.spec_from_file_location("prefill_probe", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


PROBE_MODULE = _load()
softexp2_nonpos = PROBE_MODULE.softexp2_nonpos


@pytest.fixture(scope="module")
def probe():
    return PROBE_MODULE


@pytest.fixture(scope="module")
def case():
    reqs = [make_request(300, 4, seed=70), make_request(140, 4, seed=71)]
    return reqs, make_cache(reqs, 16, seed=8)


@pytest.mark.parametrize("lean", [False, True])
@pytest.mark.parametrize(
    ("chunks", "window", "block_m"),
    [([(0, 0, 300), (1, 0, 140)], 0, None), ([(0, 200, 300), (1, 100, 140)], 0, 16),
     ([(0, 150, 300)], 100, None)],
)  # fmt: skip
def test_interior_tiles_give_the_shipped_bits(probe, case, chunks, window, block_m, lean):
    reqs, cache = case
    q = torch.cat([reqs[r].q[a:b] for r, a, b in chunks]).contiguous()
    positions = np.concatenate([np.arange(a, b) for _, a, b in chunks])
    qsl = np.cumsum([0] + [b - a for _, a, b in chunks])
    group = q.shape[1] // reqs[0].k.shape[1]
    meta = attention_metadata(positions, qsl, cache.tables[[r for r, _, _ in chunks]],
                              cache.block_size, group, "cpu", block_m, span=128)  # fmt: skip
    shipped = paged_attention(q, cache.k, cache.v, meta, SCALE, window=window)
    consts = {"LEAN": lean}
    assert same_bits(probe.launch_interior(q, cache.k, cache.v, meta, SCALE, window, consts),
                     shipped)  # fmt: skip


@triton.jit
def _nonpos_kernel(x_ptr, y_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < N, other=0.0)
    tl.store(y_ptr + i, softexp2_nonpos(x), mask=i < N)


def _nonpos_inputs() -> np.ndarray:
    """Every fp32 in [-151, -120], samples of (-inf, 0], and the special values."""
    lo, hi = np.float32(-120.0).view(np.uint32), np.float32(-151.0).view(np.uint32)
    dense = np.arange(lo, hi + 1, dtype=np.uint32).view(np.float32)
    rng = np.random.default_rng(5)
    wide = -np.exp2(rng.uniform(-149, 8, 400_000)).astype(np.float32)
    special = [0.0, -0.0, -np.inf, np.nan, -1e-45, -0.5, -1.0, -126.0, -149.5, -151.5, -1e30]
    return np.concatenate([dense, wide, np.float32(special)]).astype(np.float32)


def test_lean_exponential_equals_softexp2_on_nonpositive_inputs(monkeypatch):
    def create_fma(self, x, y, z):
        return TensorHandle(fma_f32(x.data, y.data, z.data), z.dtype.scalar)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fma", create_fma)
    x = _nonpos_inputs()
    y = torch.empty(x.size, dtype=torch.float32)
    _nonpos_kernel[(triton.cdiv(x.size, 1 << 16),)](torch.from_numpy(x), y, N=x.size,
                                                    BLOCK=1 << 16)  # fmt: skip
    got, want = y.numpy().view(np.uint32), softexp2(x).view(np.uint32)
    nan = np.isnan(x)
    assert np.array_equal(got[~nan], want[~nan])
    assert np.isnan(y.numpy()[nan]).all()
    assert (want[x <= -150] == 0).all() and (want[(x > -149) & (x < -126)] != 0).all()
