"""Batch-invariant row-wise ops (numba): RMSNorm (with fused residual add), SiLU*mul, RoPE.

Invariant (by construction): each output row is produced by a sequential, fixed-order loop
over that row; nothing depends on the number of rows. These ops are a small share of the
work, so they run on one thread (no thread-pool wake-up on the decode path).
Transcendentals are scalar libm calls (see numba_env).
"""

from __future__ import annotations

import math

import numpy as np

from samebits.kernels.cpu.numba_env import numba


@numba.njit(cache=True, fastmath=False, inline="always")
def _rms_row(x, w, eps, out) -> None:
    n = x.shape[0]
    ss = 0.0
    for i in range(n):
        v = float(x[i])
        ss += v * v
    inv = 1.0 / math.sqrt(ss / n + eps)
    for i in range(n):
        out[i] = np.float32(float(x[i]) * inv) * w[i]


@numba.njit(cache=True, fastmath=False)
def rms_norm(x, w, eps, out) -> None:
    """out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w, sum of squares in float64, in index order."""
    for r in range(x.shape[0]):
        _rms_row(x[r], w, eps, out[r])


@numba.njit(cache=True, fastmath=False)
def add_rms_norm(x, residual, w, eps, out) -> None:
    """residual[r] += x[r] (in place, float32), then out[r] = rms_norm(residual[r])."""
    for r in range(x.shape[0]):
        res = residual[r]
        xr = x[r]
        for i in range(res.shape[0]):
            res[i] = res[i] + xr[i]
        _rms_row(res, w, eps, out[r])


@numba.njit(cache=True, fastmath=False)
def head_rms_norm(x, w, eps) -> None:
    """In place per-head RMSNorm of x: [N, H, D] (Qwen3's q/k norm)."""
    n, h, _ = x.shape
    for idx in range(n * h):
        row = x[idx // h, idx % h]
        _rms_row(row, w, eps, row)


@numba.njit(cache=True, fastmath=False)
def silu_mul(gate_up, out) -> None:
    """out[r, i] = silu(g) * u with g = gate_up[r, i], u = gate_up[r, I + i]."""
    inter = out.shape[1]
    for r in range(out.shape[0]):
        row = gate_up[r]
        for i in range(inter):
            g = float(row[i])
            out[r, i] = np.float32(g / (1.0 + math.exp(-g)) * float(row[inter + i]))


@numba.njit(cache=True, fastmath=False)
def gelu_mul(gate_up, out) -> None:
    """out[r, i] = gelu_tanh(g) * u (float64, libm tanh), g = gate_up[r, i], u = gate_up[r, I + i]."""
    inter = out.shape[1]
    c = math.sqrt(2.0 / math.pi)
    for r in range(out.shape[0]):
        row = gate_up[r]
        for i in range(inter):
            g = float(row[i])
            act = 0.5 * g * (1.0 + math.tanh(c * (g + 0.044715 * g * g * g)))
            out[r, i] = np.float32(act * float(row[inter + i]))


@numba.njit(cache=True, fastmath=False)
def rope(x, positions, cos, sin) -> None:
    """In place rotate-half RoPE of x: [N, H, D] at positions [N]; cos/sin: [max_pos, D/2]."""
    n, h, d = x.shape
    half = d // 2
    for idx in range(n * h):
        row = x[idx // h, idx % h]
        p = positions[idx // h]
        for i in range(half):
            a = row[i]
            b = row[i + half]
            c = cos[p, i]
            s = sin[p, i]
            row[i] = a * c - b * s
            row[i + half] = b * c + a * s
