"""RoPE cos/sin tables, computed once per deployment (float64, rounded to float32)."""

from __future__ import annotations

import math

import numpy as np
import torch


def inverse_frequencies(head_dim: int, theta: float, scaling) -> np.ndarray:
    """Rotate-half RoPE inverse frequencies, with llama3 frequency scaling if configured."""
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling is None:
        return inv
    if scaling.rope_type != "llama3":
        raise ValueError(f"rope_scaling type {scaling.rope_type!r} is not supported")
    old_len = scaling.original_max_position_embeddings
    low_wavelen = old_len / scaling.low_freq_factor
    high_wavelen = old_len / scaling.high_freq_factor
    wavelen = 2 * math.pi / inv
    smooth = (old_len / wavelen - scaling.low_freq_factor) / (
        scaling.high_freq_factor - scaling.low_freq_factor
    )
    blended = (1 - smooth) * inv / scaling.factor + smooth * inv
    out = np.where(wavelen > low_wavelen, inv / scaling.factor, blended)
    return np.where(wavelen < high_wavelen, inv, out)


def rope_tables(head_dim: int, theta: float, scaling, max_positions: int):
    """(cos, sin), each float32 [max_positions, head_dim // 2]; row p is position p."""
    inv = inverse_frequencies(head_dim, theta, scaling)
    angles = np.arange(max_positions, dtype=np.float64)[:, None] * inv[None, :]
    cos = torch.from_numpy(np.cos(angles).astype(np.float32))
    sin = torch.from_numpy(np.sin(angles).astype(np.float32))
    return cos.contiguous(), sin.contiguous()
