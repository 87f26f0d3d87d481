"""Random GGUF Q4_1 / Q8_0 weights with their float32 values from gguf-py's dequantizer (the
code the loader runs), and random bfloat16 / float16 weights with torch's widening, for tests
of kernels that read stored weights."""

from __future__ import annotations

import numpy as np
import torch
from gguf import GGMLQuantizationType
from gguf.quants import dequantize

from samebits.kernels.quantized import QuantizedTensor

_SPECIAL_F16 = np.array([0.0, -0.0, -1.0, 1e-4, -65504.0], dtype=np.float16)


def _f16_scales(rows: int, blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Mostly ordinary scales, with zeros of both signs, negatives and extremes mixed in."""
    scales = rng.normal(0, 0.05, (rows, blocks)).astype(np.float16)
    special = rng.random((rows, blocks)) < 0.1
    scales[special] = rng.choice(_SPECIAL_F16, int(special.sum()))
    return scales


def from_raw(qtype: str, raw: np.ndarray, rows: int, k: int):
    """(blocks, float32 weight) of raw GGUF rows [rows, k / 32 * block bytes]."""
    weight = dequantize(raw, GGMLQuantizationType[qtype])
    source = QuantizedTensor(qtype, (rows, k), torch.from_numpy(raw.copy()))
    return source, torch.from_numpy(np.ascontiguousarray(weight, dtype=np.float32))


def random_q4_1(rows: int, k: int, gen: torch.Generator) -> tuple[QuantizedTensor, torch.Tensor]:
    """(blocks, float32 weight [rows, k]) of a random Q4_1 matrix."""
    rng = np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=gen)))
    blocks = k // 32
    d, m = _f16_scales(rows, blocks, rng), _f16_scales(rows, blocks, rng)
    qs = rng.integers(0, 256, (rows, blocks, 16), dtype=np.uint8)
    raw = np.concatenate([d[..., None].view(np.uint8), m[..., None].view(np.uint8), qs], axis=-1)
    return from_raw("Q4_1", raw.reshape(rows, -1), rows, k)


def random_q8_0(rows: int, k: int, gen: torch.Generator) -> tuple[QuantizedTensor, torch.Tensor]:
    """(blocks, float32 weight [rows, k]) of a random Q8_0 matrix."""
    rng = np.random.default_rng(int(torch.randint(0, 2**31, (1,), generator=gen)))
    blocks = k // 32
    d = _f16_scales(rows, blocks, rng)
    qs = rng.integers(-128, 128, (rows, blocks, 32), dtype=np.int8).view(np.uint8)
    raw = np.concatenate([d[..., None].view(np.uint8), qs], axis=-1)
    return from_raw("Q8_0", raw.reshape(rows, -1), rows, k)


_HALF_EDGES = [0.0, -0.0, 1e-7, -6e-8, 3e-5, 65504.0, -2.5]  # float16 subnormals included


def random_half(
    dtype: torch.dtype, rows: int, k: int, gen: torch.Generator
) -> tuple[QuantizedTensor, torch.Tensor]:
    """(stored values, float32 weight [rows, k]) of a random bfloat16 / float16 matrix."""
    values = (torch.randn(rows, k, generator=gen) * 2).to(dtype)
    edges = torch.tensor(_HALF_EDGES * (k // len(_HALF_EDGES) + 1))[:k].to(dtype)
    values[0] = edges
    qtype = {torch.bfloat16: "BF16", torch.float16: "F16"}[dtype]
    stored = QuantizedTensor(qtype, (rows, k), values.contiguous().view(torch.uint8))
    return stored, values.to(torch.float32)


def random_bf16(rows: int, k: int, gen: torch.Generator):
    return random_half(torch.bfloat16, rows, k, gen)


def random_f16(rows: int, k: int, gen: torch.Generator):
    return random_half(torch.float16, rows, k, gen)
