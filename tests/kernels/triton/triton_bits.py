"""Bitwise comparison helpers for the Triton kernel tests (integer views only)."""

from __future__ import annotations

import torch

_INT_VIEW = {torch.float32: torch.int32, torch.float16: torch.int16, torch.bfloat16: torch.int16}


def bits(t: torch.Tensor) -> torch.Tensor:
    """The raw bits of a float tensor as an integer tensor of the same shape."""
    return t.contiguous().view(_INT_VIEW[t.dtype])


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """True when ``a`` and ``b`` have the same shape, dtype and bit pattern everywhere."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return bool((bits(a) == bits(b)).all())


def differing_rows(a: torch.Tensor, b: torch.Tensor) -> list[int]:
    """Indices along dim 0 where the bits of ``a`` and ``b`` differ (for failure messages)."""
    diff = (bits(a) != bits(b)).reshape(a.shape[0], -1).any(dim=1)
    return diff.nonzero().flatten().tolist()
