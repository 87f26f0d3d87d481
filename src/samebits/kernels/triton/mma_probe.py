"""Start-up qualification of the GPU's tensor-core arithmetic against the MMA emulator.

`chain_bits(x, w, acc)` runs the bf16 `tl.dot` chain with fp32 accumulation that the
invariant plan's linears use (`acc = tl.dot(x_k, w_k, acc)` over k tiles in order) on bit
tensors. `qualify()` runs it on the committed vector set (mma_probe_vectors.npz: every input
class of mma_cases, fixed seeds) and compares the bits with the expected ones, which are the
emulator's (tests/kernels/test_mma_probe.py checks the emulator still gives them). A GPU whose
bits equal them computes the chains the CPU emulator replays. Every GPU invariant deployment
runs it at start-up (`probe_component`, `deployment.build_deployment`), with the attention's
exponential on its whole grid (`ex2_grid_mismatches`: ex2.approx.ftz at every multiple of
2^-12 in [-127, 0] against the table of `replay.ex2q`): the fingerprint
records the result; a GPU whose bits differ (or a probe that cannot run) gets another
numerics id than the CPU replay's (`fingerprint._gpu_numerics`), so its logs are refused on
a CPU instead of failing there.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import triton
import triton.language as tl

from samebits.kernels.triton._softexp2 import ex2_ftz

if TYPE_CHECKING:
    import torch

VECTORS = Path(__file__).parent / "mma_probe_vectors.npz"
PROBE_SHAPE = (16, 16, 64)  # M, N, K of each class's probe matrices
PROBE_SEED = 20261201
BLOCK_M = BLOCK_N = 64


@triton.jit
def mma_chain_kernel(x_ptr, w_ptr, acc_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):  # fmt: skip
    """y = acc + x @ w.T as k-ordered bf16 tl.dot steps; rows past M / N read as zeros."""
    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    acc = tl.load(acc_ptr + rm[:, None] * N + rn[None, :], mask=mask, other=0.0)
    for k0 in range(0, K, BLOCK_K):
        a = tl.load(x_ptr + rm[:, None] * K + (k0 + rk)[None, :], mask=(rm < M)[:, None], other=0.0)
        b = tl.load(w_ptr + rn[None, :] * K + (k0 + rk)[:, None], mask=(rn < N)[None, :], other=0.0)
        acc = tl.dot(a, b, acc)
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc, mask=mask)


def chain_bits(
    x: torch.Tensor, w: torch.Tensor, acc: torch.Tensor, block_m: int = BLOCK_M,
    num_warps: int = 4,
) -> torch.Tensor:  # fmt: skip
    """GPU chain on bit tensors: x [M,K], w [N,K] int16 (bf16 bits), acc [M,N] int32 (fp32
    bits), all on one CUDA device -> int32 [M,N] fp32 bits. K a multiple of 16. The tile
    height and warp count pick the instruction (BLOCK_M 64 / 128: wgmma; 16: mma.sync), not
    the bits (measured on the H200, DESIGN 2b)."""
    import torch

    m, k = x.shape
    n = w.shape[0]
    if k % 16 or w.shape[1] != k or tuple(acc.shape) != (m, n):
        raise ValueError(f"mma chain: x [M,K], w [N,K], acc [M,N], K % 16 == 0; got "
                         f"{tuple(x.shape)}, {tuple(w.shape)}, {tuple(acc.shape)}")  # fmt: skip
    y = torch.empty((m, n), dtype=torch.float32, device=x.device)
    grid = (triton.cdiv(m, block_m), triton.cdiv(n, BLOCK_N))
    mma_chain_kernel[grid](
        x.contiguous().view(torch.bfloat16), w.contiguous().view(torch.bfloat16),
        acc.contiguous().view(torch.float32), y, m, n, k, BLOCK_M=block_m, BLOCK_N=BLOCK_N,
        BLOCK_K=64 if k % 64 == 0 else 16, num_warps=num_warps,
    )  # fmt: skip
    return y.view(torch.int32)


@triton.jit
def ex2_grid_kernel(out_ptr, k0, n, BLOCK: tl.constexpr):
    """out[i] = ex2.approx.ftz((k0 + i) * 2^-12): the attention's exponential on its grid."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, ex2_ftz((k0 + i).to(tl.float32) * 0.000244140625), mask=i < n)


def ex2_grid_mismatches(device: str = "cuda") -> tuple[int, int]:
    """(inputs, mismatches) of the GPU's ex2.approx.ftz at every multiple of 2^-12 in
    [-127, 0] against the table of `replay.ex2q` (what the CPU replay assumes of it)."""
    import torch

    from samebits.kernels.replay.ex2q import GRID, LOW, ex2_ftz_grid

    k0, n = LOW * GRID, -LOW * GRID + 1
    out = torch.empty(n, dtype=torch.float32, device=device)
    ex2_grid_kernel[(triton.cdiv(n, 1024),)](out, k0, n, BLOCK=1024, enable_fp_fusion=False)
    expected = ex2_ftz_grid(np.arange(k0, k0 + n, dtype=np.float32) / np.float32(GRID))
    return n, int((out.cpu().numpy().view(np.uint32) != expected.view(np.uint32)).sum())


def make_vectors() -> dict[str, np.ndarray]:
    """The probe set: per class of mma_cases, x, w, acc and the emulator's expected bits."""
    from samebits.kernels.cpu import mma_cases, mma_model

    out: dict[str, np.ndarray] = {}
    m, n, k = PROBE_SHAPE
    for i, kind in enumerate(sorted(mma_cases.KINDS)):
        x, w, acc = mma_cases.make_case(kind, m, n, k, np.random.default_rng(PROBE_SEED + i))
        out[f"{kind}_x"], out[f"{kind}_w"], out[f"{kind}_acc"] = x, w, acc
        out[f"{kind}_y"] = mma_model.mma_chain(x, w, acc)
    return out


def load_vectors() -> dict[str, np.ndarray]:
    with np.load(VECTORS) as data:
        return {key: data[key] for key in data.files}


def vectors_sha256() -> str:
    """Identity of the committed probe set (for the fingerprint)."""
    return hashlib.sha256(VECTORS.read_bytes()).hexdigest()


@dataclass(frozen=True)
class ProbeReport:
    """outputs compared, and per class the outputs whose bits differ (passed: none)."""

    outputs: int
    mismatches: dict[str, int]

    @property
    def passed(self) -> bool:
        return not any(self.mismatches.values())


def qualify(device: str = "cuda") -> ProbeReport:
    """Run the committed probe vectors on `device`; compare with the expected bits."""
    import torch

    vectors, outputs, mismatches = load_vectors(), 0, {}
    kinds = sorted({key.rsplit("_", 1)[0] for key in vectors})
    for kind in kinds:
        x, w, acc = (torch.from_numpy(vectors[f"{kind}_{p}"].view(dt)).to(device)
                     for p, dt in (("x", np.int16), ("w", np.int16), ("acc", np.int32)))  # fmt: skip
        y = chain_bits(x, w, acc)
        got = y.cpu().numpy().view(np.uint32)
        outputs += got.size
        mismatches[kind] = int((got != vectors[f"{kind}_y"]).sum())
    n, mismatches["ex2_grid"] = ex2_grid_mismatches(device)
    return ProbeReport(outputs + n, mismatches)


def probe_component(run: Callable[[], ProbeReport] = qualify) -> dict:
    """The fingerprint's record of the start-up probe: the vector set, outputs compared,
    mismatches and `status` ("equal": every output is the emulator's; "differs"; "error: ..."
    when it could not run, which serving survives)."""
    record: dict = {"vectors_sha256": vectors_sha256()}
    try:
        report = run()
    except Exception as exc:  # the probe's own failure must not stop a deployment
        return {**record, "status": f"error: {type(exc).__name__}: {exc}"[:300]}
    mismatches = sum(report.mismatches.values())
    status = "equal" if report.passed else "differs"
    return {**record, "outputs": report.outputs, "mismatches": mismatches, "status": status}
