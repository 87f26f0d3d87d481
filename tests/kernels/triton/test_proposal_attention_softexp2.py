"""The proposed soft-exp2 attention kernels (`proposals/attention_softexp2.py`) on the CPU
interpreter, bit for bit against the CPU replay (`kernels/replay/attention.py`).

The interpreter is made to compute what the replay assumes of the GPU: ``tl.dot`` on bf16 is
the H200 MMA chain (`mma_emu`, from the given accumulator), ``tl.fma`` is one rounding, the
fp32 -> bf16 cast rounds to nearest even. The interpreter contracts no multiply-add, so the
replay runs with `Contractions(False, False)`; which contractions the GPU compiler makes (and
the bits of the real kernel) is the H200 check's: benchmarks/replay_attention_check.py."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import triton.language as tl
from triton.runtime import interpreter
from triton.runtime.interpreter import TensorHandle

from samebits.kernels.cpu import mma_emu
from samebits.kernels.replay import attention as ra
from samebits.kernels.replay.linear import fp32_to_bf16_bits
from samebits.kernels.replay.softexp import fma_f32
from samebits.kernels.triton import attention as ta

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "proposals"))
import attention_softexp2 as proposal  # noqa: E402

pytestmark = pytest.mark.skipif(not mma_emu.available(), reason="needs the native MMA emulator")
HKV, GROUP, D, PAGE, SPAN = 2, 2, 16, 16, 128
KERNELS = ("paged_attention_kernel", "split_span_kernel", "merge_spans_kernel")


@pytest.fixture(autouse=True)
def _gpu_semantics(monkeypatch):
    """GPU semantics in the interpreter, the proposal's kernels in `attention`; returns a
    runner of the shipped kernels (same semantics) for the non-vacuity checks."""

    def create_fma(self, x, y, z):
        return TensorHandle(fma_f32(x.data, y.data, z.data), z.dtype.scalar)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        assert a.dtype.scalar == tl.bfloat16 and b.dtype.scalar == tl.bfloat16
        acc = np.ascontiguousarray(d.data.astype(np.float32)).view(np.uint32)
        out = mma_emu.chain_bits(a.data, np.ascontiguousarray(b.data.T), acc)
        return TensorHandle(out.view(np.float32), d.dtype.scalar)

    real_trunc = interpreter.InterpreterBuilder.create_fp_trunc

    def create_fp_trunc(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            bits = np.ascontiguousarray(src.data, np.float32).view(np.uint32)
            return TensorHandle(fp32_to_bf16_bits(bits), tl.bfloat16)
        return real_trunc(self, src, dst_type)

    def get_bf16(self, value):
        fp32 = np.array([value], np.float32).view(np.uint32)
        return TensorHandle(fp32_to_bf16_bits(fp32), tl.bfloat16)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "get_bf16", get_bf16, raising=False)
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fma", create_fma)
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", create_dot)
    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fp_trunc", create_fp_trunc)
    shipped = {n: getattr(ta, n) for n in KERNELS}

    def run_shipped(fn, *args):
        with monkeypatch.context() as m:
            for name, kernel in shipped.items():
                m.setattr(ta, name, kernel)
            return fn(*args)

    for name in KERNELS:
        monkeypatch.setattr(ta, name, getattr(proposal, name))
    return run_shipped


def launch_fp32(q, kc, vc, meta, scale: float, window: int = 0) -> torch.Tensor:
    """`attention.paged_attention`'s launches with an fp32 output (the rows before the cast)."""
    out = torch.empty(q.shape, dtype=torch.float32)
    kernel_window = window or ta.FULL_WINDOW
    splits = ta.decode_splits(meta, HKV)
    if splits:
        ta._split_decode(q, kc, vc, meta, scale, splits, out, kernel_window)
        return out
    ta.paged_attention_kernel[(meta.num_programs, HKV)](
        q, kc, vc, out, meta.positions, meta.prog_req, meta.prog_row0, meta.query_end,
        meta.block_tables, meta.block_tables.shape[1], scale * ta.LOG2E, kernel_window,
        HKV=HKV, GROUP=meta.group, D=D, PAGE=meta.block_size, BLOCK_M=meta.block_m,
        BLOCK_N=ta.KEY_BLOCK, SPAN=meta.span, num_warps=meta.num_warps,
    )  # fmt: skip
    return out


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


@pytest.mark.parametrize("tokens,window", [(150, 0), (150, 40)])
def test_prefill_kernel_equals_replay(tokens, window, _gpu_semantics):
    q = bf16((tokens, HKV * GROUP, D), 1, 2.0)
    k, v = bf16((tokens, HKV, D), 2), bf16((tokens, HKV, D), 3)
    kc, vc, table = paged(k, v, 4)
    positions = np.arange(tokens)
    meta = ta.attention_metadata(positions, np.array([0, tokens]), table, PAGE, GROUP, "cpu",
                                 span=SPAN)  # fmt: skip
    scale = D**-0.5
    out = ta.paged_attention(q, kc, vc, meta, scale, window)
    launch = ra.Launch(ta.KEY_BLOCK, SPAN, scale * ta.LOG2E)
    fuse = ra.Contractions(l_update=False, acc_update=False)
    want = ra.paged_attention(bits(q), bits(k), bits(v), positions, GROUP, launch, window, fuse)
    assert np.array_equal(bits(out), want)
    # the rows before the cast, fp32: the exp2 and every rounding show here
    want32 = ra.paged_attention(bits(q), bits(k), bits(v), positions, GROUP, launch, window,
                                fuse, out_dtype="float32")  # fmt: skip
    assert np.array_equal(fp32_bits(launch_fp32(q, kc, vc, meta, scale, window)), want32)
    # not vacuous: the replay's other numerics give other fp32 bits on these inputs
    fused = ra.paged_attention(bits(q), bits(k), bits(v), positions, GROUP, launch, window,
                               out_dtype="float32")  # fmt: skip
    assert not np.array_equal(fused, want32)
    shipped = _gpu_semantics(launch_fp32, q, kc, vc, meta, scale, window)  # the host's exp2
    assert not np.array_equal(fp32_bits(shipped), want32)


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
    fuse = ra.Contractions(l_update=False, acc_update=False)
    want = ra.paged_attention(bits(q), bits(k), bits(v), positions, GROUP, launch, 0, fuse)
    assert np.array_equal(bits(out), want)
    assert ta.decode_splits(meta, HKV) > 1  # the split-span + merge launches ran
    want32 = ra.paged_attention(bits(q), bits(k), bits(v), positions, GROUP, launch, 0, fuse,
                                out_dtype="float32")  # fmt: skip
    assert np.array_equal(fp32_bits(launch_fp32(q, kc, vc, meta, scale)), want32)
