"""The samebits GEMM (sbgemm.c): a linear layer that is batch-invariant by construction.

Every output element is one SIMD lane running K fused multiply-adds in k order, so a row's
result never depends on the number of rows, its position, the vector width or how columns
are split between threads (see sbgemm.c).
"""

from __future__ import annotations

import torch

from samebits.kernels.cpu import native

# Below this many multiply-adds a call runs on the calling thread (thread hand-off costs more).
PARALLEL_MIN_MACS = 1 << 22


class SbLinear:
    """y = x @ weight.T (+ bias), weight [N, K] float32; invariant by construction."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, num_threads: int):
        tile = native.library().sb_column_tile()
        n, k = weight.shape
        self.n, self.k, self.np, self.tile = n, k, -(-n // tile) * tile, tile
        self.wt = torch.zeros((k, self.np), dtype=torch.float32)
        self.wt[:, :n] = weight.t()
        self.bias = bias
        self.threads = max(1, num_threads)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows = x.shape[0]
        y = torch.empty((rows, self.np), dtype=torch.float32)
        if rows:
            args = (x.data_ptr(), rows, self.k, self.wt.data_ptr(), self.np, y.data_ptr())
            threads = self.threads if rows * self.k * self.np >= PARALLEL_MIN_MACS else 1
            native.run_split(native.library().sb_gemm, args, self.np, threads, self.tile)
        out = y[:, : self.n] if self.np != self.n else y
        return out + self.bias if self.bias is not None else out
