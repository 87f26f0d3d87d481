"""Linear layers on BLAS with a fixed set of row-tile shapes.

The reduction order inside a BLAS call is the library's. We make it deployment-static by
never calling it with a data-dependent shape: rows are padded to a multiple of `quantum` and
cut greedily into tiles from a fixed set, and each tile is one `torch.mm` of shape
(tile, K) x (K, N). That every row's result is independent of its tile size, its position
in the tile and its neighbours is *qualified* at start-up by `qualify` (evidence class:
qualification, a measurement recorded in the fingerprint), not proven.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from samebits.bits import same_bits

PROBE_ROW_COUNTS = (1, 2, 3, 5, 8, 13, 21, 33, 64, 100, 128)


def split_rows(num_rows: int, tiles: Sequence[int]) -> list[int]:
    """Greedy cut of `num_rows` (a multiple of min(tiles)) into tile sizes, largest first."""
    sizes: list[int] = []
    rest = num_rows
    for tile in tiles:
        while rest >= tile:
            sizes.append(tile)
            rest -= tile
    if rest:
        raise ValueError(f"{num_rows} rows cannot be cut into tiles {tuple(tiles)}")
    return sizes


class TiledLinear:
    """y = x @ weight.T (+ bias) with static row tiles. weight: [N, K] float32 contiguous.
    `splits` K ranges (the split plan): one tiled product per range, summed in range order."""

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None, tiles: Sequence[int],
        splits: int = 1,
    ):  # fmt: skip
        if splits < 1 or weight.shape[1] % splits:
            raise ValueError(f"{splits} K ranges do not divide K = {weight.shape[1]}")
        self.weight = weight.contiguous()
        self.bias = bias
        self.tiles = tuple(sorted(tiles, reverse=True))
        self.quantum = self.tiles[-1]
        self.splits = splits

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.weight.shape)  # type: ignore[return-value]

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        parts = self.partials(x) if self.splits > 1 else None
        y = self._tiled(x, self.weight) if parts is None else parts[0]
        for part in () if parts is None else parts[1:]:
            y = y + part
        return y + self.bias if self.bias is not None else y

    def partials(self, x: torch.Tensor) -> torch.Tensor:
        """[splits, rows, N]: each K range's product, in range order (no bias)."""
        kr = self.weight.shape[1] // self.splits
        ranges = [slice(s * kr, (s + 1) * kr) for s in range(self.splits)]
        return torch.stack([self._tiled(x[:, r], self.weight[:, r]) for r in ranges])

    def _tiled(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        padded = -(-rows // self.quantum) * self.quantum
        xp = torch.zeros((padded, x.shape[1]), dtype=x.dtype)
        xp[:rows] = x
        y = torch.empty((padded, weight.shape[0]), dtype=x.dtype)
        wt = weight.contiguous().t()
        start = 0
        for size in split_rows(padded, self.tiles):
            torch.mm(xp[start : start + size], wt, out=y[start : start + size])
            start += size
        return y[:rows]


def qualify(linear, seed: int = 0) -> bool:
    """Probe (any linear with `.shape == (N, K)`): every row of `linear(X[o:o+m])` equals the
    same row of `linear(X)` bit for bit,
    for the row counts in PROBE_ROW_COUNTS at several offsets (so every tile size and many
    in-tile positions and neighbours are exercised)."""
    gen = torch.Generator().manual_seed(seed)
    total = 160
    x = torch.randn((total, linear.shape[1]), generator=gen)
    ref = linear(x)
    for i, m in enumerate(PROBE_ROW_COUNTS):
        offset = (7 * i) % (total - m + 1)
        if not same_bits(linear(x[offset : offset + m]), ref[offset : offset + m]):
            return False
    return True
