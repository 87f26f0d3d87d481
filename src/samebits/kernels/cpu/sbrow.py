"""Row kernels in C (sbrow.c): SiLU * mul, GELU (tanh) * mul, RMSNorm and the fused residual add + RMSNorm.

Invariant (by construction, see sbrow.c): each output row is computed entirely by one thread
with an operation sequence that depends only on the row's values and its length, so neither
the batch, the row's position, the vector width nor the thread split changes a bit.
All tensors are float32; the wrappers check dtype, contiguity and shapes.
"""

from __future__ import annotations

import torch

from samebits.kernels.cpu import native

# Below this many elements a call runs on the calling thread.
PARALLEL_MIN_ELEMENTS = 1 << 13


def _check(name: str, t: torch.Tensor, shape: tuple[int, ...]) -> None:
    if t.dtype is not torch.float32 or not t.is_contiguous() or t.shape != shape:
        raise ValueError(
            f"{name}: expected a contiguous float32 tensor of shape {shape}, got "
            f"{t.dtype} {tuple(t.shape)} (contiguous={t.is_contiguous()})"
        )


def _threads(elements: int, threads: int) -> int:
    return max(1, threads) if elements >= PARALLEL_MIN_ELEMENTS else 1


def silu_mul(gate_up: torch.Tensor, out: torch.Tensor, threads: int) -> None:
    """out[r, i] = silu(gate_up[r, i]) * gate_up[r, I + i]; gate_up [R, 2I], out [R, I]."""
    rows, inter = out.shape
    _check("gate_up", gate_up, (rows, 2 * inter))
    _check("out", out, (rows, inter))
    use = _threads(rows * inter, threads)
    native.library().sb_silu_mul(gate_up.data_ptr(), rows, inter, out.data_ptr(), use)


def gelu_mul(gate_up: torch.Tensor, out: torch.Tensor, threads: int) -> None:
    """out[r, i] = gelu_tanh(gate_up[r, i]) * gate_up[r, I + i] (sbrow.c's formula)."""
    rows, inter = out.shape
    _check("gate_up", gate_up, (rows, 2 * inter))
    _check("out", out, (rows, inter))
    use = _threads(rows * inter, threads)
    native.library().sb_gelu_mul(gate_up.data_ptr(), rows, inter, out.data_ptr(), use)


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float, out: torch.Tensor, threads: int) -> None:
    """out[r] = x[r] / sqrt(mean(x[r]^2) + eps) * w (float64 sum of squares); x, out [R, D]."""
    rows, dim = x.shape
    _check("x", x, (rows, dim))
    _check("w", w, (dim,))
    _check("out", out, (rows, dim))
    use = _threads(rows * dim, threads)
    lib = native.library()
    lib.sb_rms_norm(x.data_ptr(), rows, dim, w.data_ptr(), eps, out.data_ptr(), use)


def add_rms_norm(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float, out: torch.Tensor,
    threads: int,
) -> None:  # fmt: skip
    """residual[r] += x[r] IN PLACE (float32), then out[r] = rms_norm(residual[r])."""
    rows, dim = x.shape
    _check("x", x, (rows, dim))
    _check("residual", residual, (rows, dim))
    _check("w", w, (dim,))
    _check("out", out, (rows, dim))
    use = _threads(rows * dim, threads)
    native.library().sb_add_rms_norm(
        x.data_ptr(), residual.data_ptr(), rows, dim, w.data_ptr(), eps, out.data_ptr(), use
    )
