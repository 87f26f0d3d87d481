"""A weight kept in its checkpoint's stored form (quantized blocks or 16-bit values), next to
its float32 copy."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class QuantizedTensor:
    """The stored form of one [N, K] weight, one row of bytes per output row (HF row order):
    GGUF Q4_1 / Q8_0 blocks, or bfloat16 / float16 values ("BF16" / "F16").

    Invariant: widening `data` by the `qtype` rule (GGUF's dequantization, or the exact 16-bit
    to float32 conversion) gives, bit for bit, the float32 weight the loader produced for the
    same name (kernels that read the stored form verify this).
    """

    qtype: str
    shape: tuple[int, int]
    data: torch.Tensor  # uint8 [N, bytes per row]

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
