"""The native kernels give the same bits when built for AVX2 as for this machine (AVX-512
here): their per-output operation order does not depend on the vector width."""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import torch

from quantized_weights import random_f16, random_q4_1
from samebits.bits import same_bits
from samebits.kernels.cpu import native, sbattn, sbgemm, sbrow


def _avx2_library(tmp_path) -> ctypes.CDLL:
    out = tmp_path / "avx2.so"
    flags = ("-O3", "-mavx2", "-mfma", "-ffp-contract=off", "-fPIC", "-shared", "-pthread")
    subprocess.run(native.compile_command(native._compiler(), flags, out), check=True)
    lib = ctypes.CDLL(str(out))
    native.declare(lib)
    return lib


def _avx2_gemm(lib, linear: sbgemm.SbLinear, x: torch.Tensor, threads: int) -> torch.Tensor:
    y = torch.empty(x.shape[0], linear.np)
    fmt = sbgemm.FORMATS[linear.format]
    lib.sb_gemm(x.data_ptr(), x.shape[0], linear.k, linear.packed.data_ptr(), fmt, linear.np,
                y.data_ptr(), threads)  # fmt: skip
    return y[:, : linear.n]


def test_avx2_build_matches_native_build(tmp_path):
    lib = _avx2_library(tmp_path)
    gen = torch.Generator().manual_seed(0)
    w, x = torch.randn(960, 576, generator=gen), torch.randn(5, 576, generator=gen)
    dense = sbgemm.SbLinear(w, None, 1)
    assert same_bits(dense(x), _avx2_gemm(lib, dense, x, 2))
    source, weight = random_q4_1(200, 576, gen)
    quantized = sbgemm.SbLinear(weight, None, 2, source)
    assert quantized.format == "Q4_1"
    assert same_bits(quantized(x), _avx2_gemm(lib, quantized, x, 1))
    for rows in (1, 2, 4):  # the native build's fused few-row path vs the AVX2 scratch path
        assert same_bits(quantized(x[:rows]), _avx2_gemm(lib, quantized, x[:rows], 2))
        assert same_bits(dense(x[:rows]), _avx2_gemm(lib, dense, x[:rows], 1))
    source, weight = random_f16(50, 576, gen)  # no F16C in this build: the scalar widening
    half = sbgemm.SbLinear(weight, None, 2, source)
    assert half.format == "F16"
    assert same_bits(half(x), _avx2_gemm(lib, half, x, 2))

    q, k, v = (
        torch.randn(shape, generator=gen) for shape in ((4, 9, 64), (256, 3, 64), (256, 3, 64))
    )
    pos, req, table = np.array([3, 50, 99, 120]), np.zeros(4, np.int64), np.arange(16)[None]
    ours, theirs = torch.zeros(4, 9, 64), torch.zeros(4, 9, 64)
    sbattn.paged_attention(q, k, v, pos, req, table, 16, 32, 0.125, ours, 1, span=64)
    lib.sb_attention(q.data_ptr(), 9, 64, k.data_ptr(), v.data_ptr(), 3, pos.ctypes.data,
                     req.ctypes.data, table.ctypes.data, 16, 16, 32, 64, 0.125, theirs.data_ptr(), 4, 2)  # fmt: skip
    assert same_bits(ours, theirs)
    lib.sb_attention_set_split(2)  # the AVX2 build's span split launch: the same bits too
    theirs.zero_()
    lib.sb_attention(q.data_ptr(), 9, 64, k.data_ptr(), v.data_ptr(), 3, pos.ctypes.data,
                     req.ctypes.data, table.ctypes.data, 16, 16, 32, 64, 0.125, theirs.data_ptr(), 4, 2)  # fmt: skip
    assert same_bits(ours, theirs)


def test_avx2_row_kernels_match_native_build(tmp_path):
    """silu_mul, rms_norm and add_rms_norm (sbrow.c), including scalar tails (dims 70, 5)."""
    lib = _avx2_library(tmp_path)
    gen = torch.Generator().manual_seed(1)
    for dim in (576, 70, 5):
        gate_up, w = torch.randn(6, 2 * dim, generator=gen) * 6, torch.randn(dim, generator=gen)
        x, residual = torch.randn(6, dim, generator=gen), torch.randn(6, dim, generator=gen)
        ours, theirs = torch.empty(6, dim), torch.empty(6, dim)
        sbrow.silu_mul(gate_up, ours, 1)
        lib.sb_silu_mul(gate_up.data_ptr(), 6, dim, theirs.data_ptr(), 2)
        assert same_bits(ours, theirs)
        sbrow.rms_norm(x, w, 1e-5, ours, 1)
        lib.sb_rms_norm(x.data_ptr(), 6, dim, w.data_ptr(), 1e-5, theirs.data_ptr(), 2)
        assert same_bits(ours, theirs)
        res_ours, res_theirs = residual.clone(), residual.clone()
        sbrow.add_rms_norm(x, res_ours, w, 1e-5, ours, 1)
        lib.sb_add_rms_norm(x.data_ptr(), res_theirs.data_ptr(), 6, dim, w.data_ptr(), 1e-5,
                            theirs.data_ptr(), 2)  # fmt: skip
        assert same_bits(ours, theirs) and same_bits(res_ours, res_theirs)
