"""Bitwise comparison (tests, and the start-up qualification of the linear kernels).
`torch.equal` and `np.array_equal` compare values: -0.0 equals 0.0, NaN never equals itself,
and mixed dtypes may compare equal. A claim that two results have the same bits compares the
bytes."""

from __future__ import annotations

import numpy as np
import torch

Array = torch.Tensor | np.ndarray


def _as_numpy(x: Array) -> np.ndarray:
    """The bytes of `x` as a C-contiguous numpy array of its own dtype (bfloat16 and other
    dtypes numpy lacks: their raw bits as unsigned integers of the same width)."""
    if isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        try:
            return t.numpy()
        except TypeError:
            widths = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
            return t.view(widths[t.element_size()]).numpy()
    return np.ascontiguousarray(x)


def _dtype(x: Array) -> str:
    return str(x.dtype).removeprefix("torch.")


def same_bits(a: Array, b: Array) -> bool:
    """Whether `a` and `b` (torch tensors or numpy arrays, either kind on either side) have the
    same shape, the same dtype and the same bytes."""
    if tuple(a.shape) != tuple(b.shape) or _dtype(a) != _dtype(b):
        return False
    return _as_numpy(a).tobytes() == _as_numpy(b).tobytes()


def differing_rows(a: Array, b: Array) -> list[int]:
    """Indices along the first axis where `a` and `b` differ in any bit (all rows if the shapes
    or dtypes differ; [0] for differing 0-d values). For assertion messages."""
    if tuple(a.shape) != tuple(b.shape) or _dtype(a) != _dtype(b):
        return list(range(max(len(a.shape) and a.shape[0], len(b.shape) and b.shape[0], 1)))
    x, y = _as_numpy(a), _as_numpy(b)
    if x.ndim == 0:
        return [] if x.tobytes() == y.tobytes() else [0]
    xb = x.view(np.uint8).reshape(x.shape[0], -1) if x.size else x.reshape(x.shape[0], 0)
    yb = y.view(np.uint8).reshape(y.shape[0], -1) if y.size else y.reshape(y.shape[0], 0)
    return np.flatnonzero((xb != yb).any(axis=1)).tolist()
