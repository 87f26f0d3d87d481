"""A weight kept in its checkpoint's quantized blocks, next to its dequantized float32 copy."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class QuantizedTensor:
    """GGUF blocks of one [N, K] weight, one row of blocks per output row (HF row order).

    Invariant: dequantizing `data` with GGUF's `qtype` rule gives, bit for bit, the float32
    weight the loader produced for the same name (kernels that read the blocks verify this).
    """

    qtype: str
    shape: tuple[int, int]
    data: torch.Tensor  # uint8 [N, K / 32 * bytes per block]

    @staticmethod
    def concat(parts: list[QuantizedTensor | None]) -> QuantizedTensor | None:
        """Rows of several weights stacked (fused projections), or None if any is missing or
        the types or widths differ."""
        if not parts or any(p is None for p in parts):
            return None
        first = parts[0]
        if any(p.qtype != first.qtype or p.shape[1] != first.shape[1] for p in parts):
            return None
        rows = sum(p.shape[0] for p in parts)
        return QuantizedTensor(
            first.qtype, (rows, first.shape[1]), torch.cat([p.data for p in parts])
        )
