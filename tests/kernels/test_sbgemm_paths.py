"""sbgemm's two code paths (fused: k-rows expanded in registers, for few rows; scratch: strips
expanded to float32 memory, for more rows) give the same bits for every storage format, row
count, width (N not a multiple of the strip, K not a multiple of the block for 16-bit / f32
weights) and thread count; and the quantized strips keep GGUF's half scales (5 bits a Q4_1
weight)."""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import torch

from quantized_weights import random_bf16, random_f16, random_q4_1, random_q8_0
from samebits.bits import same_bits
from samebits.kernels.cpu import native, sbgemm

MAKERS = {"Q4_1": random_q4_1, "Q8_0": random_q8_0, "BF16": random_bf16, "F16": random_f16}
DEFAULT_FUSED_MAX_ROWS = 16  # sbgemm.c fused_max_rows


@pytest.fixture(autouse=True)
def _always_parallel(monkeypatch):
    monkeypatch.setattr(sbgemm, "PARALLEL_MIN_MACS", 0)


@contextmanager
def fused_max_rows(rows: int) -> Iterator[None]:
    """Route calls with more than `rows` rows to the scratch path (0: every call)."""
    lib = native.library()
    lib.sb_gemm_set_fused_max_rows(rows)
    try:
        yield
    finally:
        lib.sb_gemm_set_fused_max_rows(DEFAULT_FUSED_MAX_ROWS)


def _linear(fmt: str, n: int, k: int, threads: int, gen: torch.Generator) -> sbgemm.SbLinear:
    if fmt == "F32":
        return sbgemm.SbLinear(torch.randn(n, k, generator=gen), None, threads)
    source, weight = MAKERS[fmt](n, k, gen)
    linear = sbgemm.SbLinear(weight, None, threads, source)
    assert linear.format == fmt
    return linear


@pytest.mark.parametrize("fmt", ["F32", *sorted(MAKERS)])
@pytest.mark.parametrize("n,k", [(200, 64), (33, 96), (300, 576)])
def test_fused_and_scratch_paths_give_the_same_bits(fmt, n, k):
    gen = torch.Generator().manual_seed(n * k)
    x = torch.randn(37, k, generator=gen)
    for threads in (1, 2, 3):
        linear = _linear(fmt, n, k, threads, gen)
        with fused_max_rows(0):
            scratch = linear(x)
        with fused_max_rows(1 << 20):  # 16 and more: tiles of 16 rows from packed rows
            for rows in (1, 2, 3, 4, 5, 7, 8, 13, 16, 17, 31, 37):
                assert same_bits(linear(x[:rows]), scratch[:rows]), (fmt, threads, rows)
            assert same_bits(linear(x[12:13]), scratch[12:13])


@pytest.mark.parametrize("fmt", ["F32", "BF16", "F16"])
def test_widths_off_the_block(fmt):
    """K not a multiple of 32 (the fused path's last k-block is short)."""
    gen = torch.Generator().manual_seed(7)
    linear = _linear(fmt, 70, 50, 2, gen)
    x = torch.randn(17, 50, generator=gen)
    with fused_max_rows(0):
        scratch = linear(x)
    with fused_max_rows(1 << 20):
        for rows in (*range(1, 9), 16, 17):
            assert same_bits(linear(x[:rows]), scratch[:rows])


def test_quantized_strips_keep_half_scales():
    gen = torch.Generator().manual_seed(1)
    q4 = _linear("Q4_1", 64, 576, 1, gen)
    q8 = _linear("Q8_0", 64, 576, 1, gen)
    assert q4.packed.numel() * 8 == 64 * 576 * 5  # 4-bit values + 2 half scales per 32
    assert q8.packed.numel() * 8 == 64 * 576 * 8.5


class _Prefetch(ctypes.Structure):  # sbprefetch.h
    _fields_ = [
        ("start", ctypes.c_void_p), ("lines", ctypes.c_void_p), ("n_ranges", ctypes.c_long),
        ("first", ctypes.c_long), ("last", ctypes.c_long),
    ]  # fmt: skip


@pytest.mark.parametrize("fmt", ["F32", "Q4_1"])
def test_prefetch_hints_change_no_bit(fmt):
    """A GEMM fetching a hint's lines (sbprefetch.h) gives the bits of the same GEMM without
    one, on both paths and thread counts, also when the hint asks for more lines than its
    ranges hold (the cursor stops at their end)."""
    gen = torch.Generator().manual_seed(11)
    lib = native.library()
    target = torch.randn(3, 1000, generator=gen)  # three ranges of 4000 bytes to fetch
    starts = (ctypes.c_void_p * 3)(*(target[i].data_ptr() for i in range(3)))
    lines = (ctypes.c_long * 3)(63, 63, 10)
    for threads in (1, 2):
        linear = _linear(fmt, 300, 576, threads, gen)
        for rows in (1, 5, 16, 40):  # 40: the scratch path
            x = torch.randn(rows, 576, generator=gen)
            expected = linear(x)
            for first, last in ((0, 136), (50, 120), (0, 10_000)):
                hint = _Prefetch(ctypes.cast(starts, ctypes.c_void_p).value,
                                 ctypes.cast(lines, ctypes.c_void_p).value, 3, first, last)  # fmt: skip
                y = torch.empty((rows, linear.np), dtype=torch.float32)
                lib.sb_gemm_prefetching(
                    x.data_ptr(), rows, *linear._args, y.data_ptr(), threads, ctypes.byref(hint)
                )
                assert same_bits(y[:, : linear.n], expected), (fmt, threads, rows, first, last)
