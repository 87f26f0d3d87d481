"""The native kernels give the same bits when built for AVX2 as for this machine (AVX-512
here): their per-output operation order does not depend on the vector width."""

from __future__ import annotations

import ctypes
import subprocess

import numpy as np
import torch

from samebits.kernels.cpu import native, sbattn, sbgemm

L, P, F = ctypes.c_long, ctypes.c_void_p, ctypes.c_float


def _avx2_library(tmp_path) -> ctypes.CDLL:
    out = tmp_path / "avx2.so"
    flags = ["-O3", "-mavx2", "-mfma", "-ffp-contract=off", "-fPIC", "-shared"]
    subprocess.run(
        [native._compiler(), *flags, *map(str, native.SOURCES), "-o", str(out), "-lm"], check=True
    )
    lib = ctypes.CDLL(str(out))
    lib.sb_gemm.argtypes = [P, L, L, P, L, P, L, L]
    lib.sb_attention.argtypes = [P, L, L, P, P, L, P, P, P, L, L, L, F, P, L, L]
    return lib


def test_avx2_build_matches_native_build(tmp_path):
    lib = _avx2_library(tmp_path)
    gen = torch.Generator().manual_seed(0)
    w, x = torch.randn(960, 576, generator=gen), torch.randn(5, 576, generator=gen)
    wt, y = w.t().contiguous(), torch.empty(5, 960)
    lib.sb_gemm(x.data_ptr(), 5, 576, wt.data_ptr(), 960, y.data_ptr(), 0, 960)
    assert torch.equal(sbgemm.SbLinear(w, None, 1)(x), y)

    q, k, v = (
        torch.randn(shape, generator=gen) for shape in ((4, 9, 64), (256, 3, 64), (256, 3, 64))
    )
    pos, req, table = np.array([3, 50, 99, 120]), np.zeros(4, np.int64), np.arange(16)[None]
    ours, theirs = torch.zeros(4, 9, 64), torch.zeros(4, 9, 64)
    sbattn.paged_attention(q, k, v, pos, req, table, 16, 32, 0.125, ours, 1)
    lib.sb_attention(q.data_ptr(), 9, 64, k.data_ptr(), v.data_ptr(), 3, pos.ctypes.data,
                     req.ctypes.data, table.ctypes.data, 16, 16, 32, 0.125, theirs.data_ptr(), 0, 12)  # fmt: skip
    assert torch.equal(ours, theirs)
