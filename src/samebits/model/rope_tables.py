"""RoPE cos/sin tables, computed once per deployment (float64, rounded to float32).

Every step is float64 numpy (elementwise, no reduction), so a table is the same on every run
and row p depends only on p and the RoPE config, not on the table's length. Scalings:
llama3 (frequency bands), linear (every frequency / factor) and yarn (frequency ramp, cos and sin times an attention factor).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from samebits.model.config import LinearRopeScaling, RopeScaling, YarnRopeScaling


def inverse_frequencies(head_dim: int, theta: float, scaling) -> np.ndarray:
    """Rotate-half RoPE inverse frequencies (float64, head_dim // 2), scaled as configured."""
    inv = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling is None:
        return inv
    if isinstance(scaling, RopeScaling) and scaling.rope_type == "llama3":
        return _llama3_frequencies(inv, scaling)
    if isinstance(scaling, YarnRopeScaling) and scaling.rope_type == "yarn":
        return _yarn_frequencies(inv, head_dim, theta, scaling)
    if isinstance(scaling, LinearRopeScaling):
        return inv / scaling.factor
    kind = getattr(scaling, "rope_type", scaling)
    raise ValueError(
        f"rope_scaling type {kind!r} is not supported (only 'llama3', 'yarn', 'linear')"
    )


def _llama3_frequencies(inv: np.ndarray, scaling: RopeScaling) -> np.ndarray:
    """Llama 3.1: long wavelengths divided by `factor`, short ones kept, a smooth band between."""
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


def yarn_correction_range(
    head_dim: int, theta: float, scaling: YarnRopeScaling
) -> tuple[float, float]:
    """(low, high): the dimensions where `beta_fast` and `beta_slow` rotations fit in the
    original context, floored / ceiled when `truncate`, clamped to [0, head_dim - 1]."""

    def dim_of(rotations: float) -> float:
        turns = scaling.original_max_position_embeddings / (rotations * 2 * math.pi)
        return head_dim * math.log(turns) / (2 * math.log(theta))

    low, high = dim_of(scaling.beta_fast), dim_of(scaling.beta_slow)
    if scaling.truncate:
        low, high = math.floor(low), math.ceil(high)
    return max(low, 0), min(high, head_dim - 1)


def _yarn_frequencies(
    inv: np.ndarray, head_dim: int, theta: float, scaling: YarnRopeScaling
) -> np.ndarray:
    """YaRN: extrapolated (unchanged) below the correction range, interpolated (divided by
    `factor`) above it, a linear ramp in between."""
    low, high = yarn_correction_range(head_dim, theta, scaling)
    if low == high:
        high += 0.001  # a one-dimension ramp: a step, without dividing by zero
    ramp = np.clip((np.arange(head_dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolated = 1.0 - ramp
    return inv / scaling.factor * (1.0 - extrapolated) + inv * extrapolated


def attention_factor(scaling) -> float:
    """The factor on cos and sin: yarn's `attention_factor`, else 1."""
    return scaling.attention_factor if isinstance(scaling, YarnRopeScaling) else 1.0


def rope_tables(head_dim: int, theta: float, scaling, max_positions: int):
    """(cos, sin), each float32 [max_positions, head_dim // 2]; row p is position p."""
    inv = inverse_frequencies(head_dim, theta, scaling)
    angles = np.arange(max_positions, dtype=np.float64)[:, None] * inv[None, :]
    cos, sin = np.cos(angles), np.sin(angles)
    factor = attention_factor(scaling)
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    cos = torch.from_numpy(cos.astype(np.float32))
    sin = torch.from_numpy(sin.astype(np.float32))
    return cos.contiguous(), sin.contiguous()
