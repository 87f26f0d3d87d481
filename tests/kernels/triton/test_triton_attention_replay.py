"""The shipped attention kernels (`kernels/triton/_attention_kernel.py`) on the CPU
interpreter, bit for bit against the CPU replay (`kernels/replay/attention.py`).

The interpreter is made to compute what the replay assumes of the GPU: ``tl.dot`` on bf16 is
the H200 MMA chain (`mma_emu`, from the given accumulator), ``tl.fma`` is one rounding, the
fp32 -> bf16 cast rounds to nearest even. Neither the interpreter nor the GPU launches
(``enable_fp_fusion=False``) contract a multiply-add; the real kernel's bits are the GPU
check's: benchmarks/replay_attention_check.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from samebits.kernels.cpu import mma_emu
from samebits.kernels.replay import attention as ra
from samebits.kernels.replay import interpret
from samebits.kernels.triton import attention as ta

pytestmark = pytest.mark.skipif(not mma_emu.available(), reason="needs the native MMA emulator")
HKV, GROUP, D, PAGE, SPAN = 2, 2, 16, 16, 128


@pytest.fixture(autouse=True)
def _gpu_semantics(monkeypatch):
    """GPU semantics in the interpreter."""
    interpret.gpu_semantics(
        lambda obj, name, value: monkeypatch.setattr(obj, name, value, raising=False)
    )


def launch_fp32(q, kc, vc, meta, scale: float, window: int = 0) -> torch.Tensor:
    """`attention.paged_attention`'s launches with an fp32 output (the rows before the cast)."""
    return ta.paged_attention(q, kc, vc, meta, scale, window, out_dtype=torch.float32)


def fp32_bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int32).numpy().view(np.uint32)


def bf16(shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).to(torch.bfloat16)


def bits(t: torch.Tensor) -> np.ndarray:
    return t.contiguous().view(torch.int16).numpy().view(np.uint16)


def paged(k: torch.Tensor, v: torch.Tensor, seed: int):
    """k, v [L, HKV, D] scattered over pages in a seeded order; returns caches and table."""
    pages = -(-k.shape[0] // PAGE)
    table = np.random.default_rng(seed).permutation(pages + 2)[:pages].astype(np.int32)
    kc = torch.zeros(((pages + 2) * PAGE, HKV, D), dtype=torch.bfloat16)
    vc = kc.clone()
    pos = np.arange(k.shape[0])
    slots = torch.from_numpy(table[pos // PAGE] * PAGE + pos % PAGE)
    kc[slots], vc[slots] = k, v
    return kc, vc, table[None, :]


def _other_numerics(monkeypatch, which: str) -> None:
    """The replay with one step of the definition changed (for the non-vacuity checks)."""
    if which == "exp2":
        monkeypatch.setattr(ra, "ex2q", lambda x: np.exp2(np.asarray(x, np.float32)))
        return
    mma = ra._mma  # "acc": the rescaled state added after the MMA, not its accumulator

    def added(x, w, acc=None):
        return mma(x, w) if acc is None else ra.add_f32(mma(x, w), acc)

    monkeypatch.setattr(ra, "_mma", added)


@pytest.mark.parametrize("tokens,window", [(150, 0), (150, 40)])
def test_prefill_kernel_equals_replay(tokens, window, monkeypatch):
    q = bf16((tokens, HKV * GROUP, D), 1, 2.0)
    k, v = bf16((tokens, HKV, D), 2), bf16((tokens, HKV, D), 3)
    kc, vc, table = paged(k, v, 4)
    positions = np.arange(tokens)
    meta = ta.attention_metadata(positions, np.array([0, tokens]), table, PAGE, GROUP, "cpu",
                                 span=SPAN)  # fmt: skip
    scale = D**-0.5
    out = ta.paged_attention(q, kc, vc, meta, scale, window)
    launch = ra.Launch(ta.KEY_BLOCK, SPAN, scale * ta.LOG2E)
    args = (bits(q), bits(k), bits(v), positions, GROUP, launch, window)
    assert np.array_equal(bits(out), ra.paged_attention(*args))
    # the rows before the cast, fp32: the exp2 and every rounding show here
    got32 = fp32_bits(launch_fp32(q, kc, vc, meta, scale, window))
    assert np.array_equal(got32, ra.paged_attention(*args, out_dtype="float32"))
    # not vacuous: other numerics (in the numpy reference, which the native replay equals:
    # tests/kernels/test_replay_attention_native.py) give other fp32 bits here
    for which in ("exp2", "acc"):
        with monkeypatch.context() as m:
            _other_numerics(m, which)
            other = ra.paged_attention_numpy(*args, out_dtype="float32")
            assert not np.array_equal(got32, other)


def test_decode_kernels_equal_replay():
    """A decode step of one token at a long position: the split-span + merge launches."""
    length = 300
    q = bf16((1, HKV * GROUP, D), 5, 2.0)
    k, v = bf16((length, HKV, D), 6), bf16((length, HKV, D), 7)
    kc, vc, table = paged(k, v, 8)
    positions = np.array([length - 1])
    meta = ta.attention_metadata(positions, np.array([0, 1]), table, PAGE, GROUP, "cpu",
                                 span=SPAN)  # fmt: skip
    scale = D**-0.5
    out = ta.paged_attention(q, kc, vc, meta, scale)
    launch = ra.Launch(ta.KEY_BLOCK, SPAN, scale * ta.LOG2E)
    args = (bits(q), bits(k), bits(v), positions, GROUP, launch, 0)
    assert np.array_equal(bits(out), ra.paged_attention(*args))
    assert ta.decode_splits(meta, HKV) > 1  # the split-span + merge launches ran
    got32 = fp32_bits(launch_fp32(q, kc, vc, meta, scale))
    assert np.array_equal(got32, ra.paged_attention(*args, out_dtype="float32"))
