"""Flat batch layout shared by the runner, the model and the attention kernels, and the one
rule for the device views of a step's small arrays (16-byte aligned)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass(frozen=True)
class FlatBatch:
    """All scheduled tokens of all requests of one step, flattened.

    Invariants: `positions[i]` is the absolute position of token i in its request;
    `query_req[i]` indexes `block_tables`; `slot_mapping[i]` is the KV slot of token i
    (= block_tables[query_req[i], positions[i] // block_size] * block_size + positions[i] % block_size);
    `query_start_loc[r]:query_start_loc[r+1]` are request r's tokens; `seq_lens[r]` is the number
    of positions request r has after this step; `logits_indices` are the rows whose logits are returned.

    The torch tensors (`input_ids`, `slot_mapping`, `logits_indices`, `position_ids`) live on the
    deployment's device; the numpy arrays are the host copies the runner built them from (CPU
    kernels and host-side planning read those). `attn` is per-forward metadata an op set may
    attach once for all layers (`Ops.prepare_batch`).
    """

    input_ids: torch.Tensor  # [N] int64, device
    positions: np.ndarray  # [N] int64, host
    query_req: np.ndarray  # [N] int64, host
    query_start_loc: np.ndarray  # [R + 1] int64, host
    seq_lens: np.ndarray  # [R] int64, host
    slot_mapping: torch.Tensor  # [N] int64, device
    block_tables: np.ndarray  # [R, max_blocks] int64, host
    block_size: int
    logits_indices: torch.Tensor  # [S] int64, device
    position_ids: torch.Tensor | None = None  # [N] int64, device (None: CPU, use `positions`)
    attn: object | None = None

    @property
    def num_tokens(self) -> int:
        return int(self.positions.shape[0])

    def device_positions(self) -> torch.Tensor:
        """`positions` as a tensor on the batch's device."""
        if self.position_ids is not None:
            return self.position_ids
        return torch.from_numpy(self.positions)


# Triton specializes a kernel on each pointer's 16-byte alignment: every device view of a
# step's metadata starts on this boundary, so no count's parity ever meets a new binary (a
# compile mid-run: measured on the H200, 2026-12-01, ~170 ms per step it hit).
VIEW_ALIGN_BYTES = 16


def pack_aligned(arrays, dtype) -> tuple[np.ndarray, list[int]]:
    """The arrays (flattened, cast to ``dtype``) back to back in one host buffer, each starting
    at a multiple of VIEW_ALIGN_BYTES (zero padding between); returns (buffer, element
    offsets)."""
    per = VIEW_ALIGN_BYTES // np.dtype(dtype).itemsize
    sizes = [np.asarray(a).size for a in arrays]
    offsets = np.cumsum([0, *(-(-s // per) * per for s in sizes)])
    host = np.zeros(int(offsets[-1]), dtype=dtype)
    for a, off, size in zip(arrays, offsets, sizes, strict=False):
        host[off : off + size] = np.asarray(a).reshape(-1)
    return host, [int(o) for o in offsets[:-1]]


def to_device_aligned(arrays, dtype, device) -> list[torch.Tensor]:
    """The arrays as ``dtype`` tensors of their shapes on ``device``, in one host-to-device copy
    (pinned, asynchronous on a GPU), each view starting on VIEW_ALIGN_BYTES."""
    host, offsets = pack_aligned(arrays, dtype)
    flat = torch.from_numpy(host)
    if torch.device(device).type != "cpu":
        flat = flat.pin_memory().to(device, non_blocking=True)
    shapes = [np.shape(a) for a in arrays]
    return [flat[o : o + int(np.prod(sh))].view(sh) for o, sh in zip(offsets, shapes, strict=True)]
