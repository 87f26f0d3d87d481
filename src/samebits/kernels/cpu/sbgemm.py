"""The samebits GEMM (sbgemm.c): a linear layer that is batch-invariant by construction.

Every output element is one SIMD lane running K fused multiply-adds in k order, so a row's
result never depends on the number of rows, its position, the vector width or how columns
are split between threads (see sbgemm.c).

Weights live in strips of 32 output columns. A weight that came from a GGUF Q4_1 or Q8_0
tensor, or from bfloat16 / float16 data, can keep that stored form (`QuantizedTensor`; the
GGUF blocks keep their half-precision scales): the kernel expands each k-row of a strip to
exactly the loader's float32 values before the multiply-adds, so the outputs are bitwise those
of the float32 weight, while 6.4x (Q4_1: 5 bits a weight), 3.8x (Q8_0) or 2x (16-bit) fewer
bytes are read per call.
Construction checks this: both expansions in the kernel (the scratch one for many rows, the
in-register one for few rows) of every strip must equal the float32 weight bit for bit, or
`SbLinear` raises.
"""

from __future__ import annotations

import torch

from samebits.kernels.cpu import native
from samebits.kernels.quantized import QuantizedTensor

# Below this many multiply-adds a call runs on the calling thread.
PARALLEL_MIN_MACS = 1 << 18
STRIP = 32  # output columns per strip (sbgemm.c QN)
BLOCK = 32  # k per quantized block (sbgemm.c QK)
FORMATS = {"F32": 0, "Q4_1": 1, "Q8_0": 2, "BF16": 3, "F16": 4}
HALF_TYPES = ("BF16", "F16")


class SbLinear:
    """y = x @ weight.T (+ bias), weight [N, K] float32; invariant by construction.

    `source`, when given, is the stored form `weight` was widened from (quantized blocks or
    16-bit values); the kernel then reads it instead of float32 (same bits, checked at
    construction). `splits`: the split plan's K ranges (DESIGN.md §2b; it divides K): each
    range a fresh chain, the output their sum in range order; `partials` gives the ranges'
    chains one by one (a tensor-parallel rank's share).
    """

    def __init__(
        self, weight: torch.Tensor, bias: torch.Tensor | None, num_threads: int,
        source: QuantizedTensor | None = None, splits: int = 1,
    ):  # fmt: skip
        n, k = weight.shape
        if splits < 1 or k % splits:
            raise ValueError(f"sbgemm: {splits} K ranges do not divide K = {k}")
        self.n, self.k, self.np, self.splits = n, k, -(-n // STRIP) * STRIP, splits
        self.format = "F32"
        self.packed = pack_float32(weight, self.np)
        if source is not None and packable(source, k, splits):
            quantized = pack_quantized(source, self.np)
            check_expansion(quantized, source.qtype, k, self.np, self.packed)
            self.packed, self.format = quantized, source.qtype
        self.bias = bias
        self.threads = max(1, num_threads)
        self._gemm = native.library().sb_gemm_split  # per-call constants, looked up once
        self._args = (self.k, self.packed.data_ptr(), FORMATS[self.format], self.np)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_contiguous():
            x = x.contiguous()
        y = self._run(x, parts=False)
        out = y[:, : self.n] if self.np != self.n else y
        return out + self.bias if self.bias is not None else out

    def partials(self, x: torch.Tensor) -> torch.Tensor:
        """float32 [splits, rows, n]: each K range's chain (no bias), in range order."""
        if self.bias is not None:
            raise ValueError("sbgemm: partials of a linear with a bias")
        y = self._run(x.contiguous(), parts=True)
        return y[..., : self.n] if self.np != self.n else y

    def _run(self, x: torch.Tensor, parts: bool) -> torch.Tensor:
        rows = x.shape[0]
        shape = (self.splits, rows, self.np) if parts else (rows, self.np)
        y = torch.empty(shape, dtype=torch.float32)
        if rows:
            threads = self.threads if rows * self.k * self.np >= PARALLEL_MIN_MACS else 1
            self._gemm(x.data_ptr(), rows, *self._args, y.data_ptr(), threads, None,
                       self.splits, int(parts))  # fmt: skip
        return y


def packable(source: QuantizedTensor, k: int, splits: int = 1) -> bool:
    """Whether sbgemm reads this tensor's stored form directly: BF16 / F16 of any width,
    Q4_1 / Q8_0 with each of the `splits` K ranges a multiple of 32."""
    if source.shape[1] != k:
        return False
    blocks = k % (BLOCK * splits) == 0
    return source.qtype in HALF_TYPES or (source.qtype in ("Q4_1", "Q8_0") and blocks)


def pack_float32(weight: torch.Tensor, np_: int) -> torch.Tensor:
    """[N, K] float32 -> bytes of strips: strip s holds w[k][c] = weight[32 s + c, k]."""
    return _strips(weight.to(torch.float32), np_)


def _strips(values: torch.Tensor, np_: int) -> torch.Tensor:
    """[N, K] values of one dtype -> bytes of strips of w[k][32], zero columns from N to np_."""
    n, k = values.shape
    padded = torch.zeros((np_, k), dtype=values.dtype)
    padded[:n] = values
    strips = padded.reshape(np_ // STRIP, STRIP, k).transpose(1, 2).contiguous()
    return strips.reshape(-1).view(torch.uint8)


def pack_quantized(source: QuantizedTensor, np_: int) -> torch.Tensor:
    """Stored rows [N, row bytes] -> bytes of strips in the sbgemm.c layout."""
    n, k = source.shape
    if source.qtype in HALF_TYPES:
        return _strips(source.data.view(torch.int16).reshape(n, k), np_)
    blocks = source.data.reshape(n, k // BLOCK, -1)
    padded = torch.zeros((np_, *blocks.shape[1:]), dtype=torch.uint8)
    padded[:n] = blocks
    by_strip = padded.reshape(np_ // STRIP, STRIP, k // BLOCK, -1).transpose(1, 2)
    if source.qtype == "Q4_1":
        parts = [_f16_field(by_strip, 0), _f16_field(by_strip, 2), _q4_nibbles(by_strip[..., 4:])]
    else:
        parts = [
            _f16_field(by_strip, 0),
            by_strip[..., 2:].transpose(2, 3).reshape(*_lead(by_strip), -1),
        ]
    return torch.cat(parts, dim=-1).reshape(-1).contiguous()


def _lead(by_strip: torch.Tensor) -> tuple[int, int]:
    return by_strip.shape[0], by_strip.shape[1]


def _f16_field(by_strip: torch.Tensor, offset: int) -> torch.Tensor:
    """Per (strip, block): the 32 columns' half-precision field at `offset`, its 2 bytes each
    as stored (the kernel widens them exactly)."""
    return by_strip[..., offset : offset + 2].reshape(*_lead(by_strip), -1)


def _q4_nibbles(qs: torch.Tensor) -> torch.Tensor:
    """[S, B, 32 columns, 16 bytes] GGUF nibbles (k < 16 low, k >= 16 high) -> per k, 16
    bytes holding column j (low nibble) and column j + 16 (high nibble)."""
    values = torch.cat([qs & 15, qs >> 4], dim=-1).transpose(2, 3)  # [S, B, 32 k, 32 columns]
    packed = values[..., :16] | (values[..., 16:] << 4)
    return packed.reshape(*_lead(qs), -1)


def check_expansion(
    packed: torch.Tensor, qtype: str, k: int, np_: int, reference: torch.Tensor
) -> None:
    """Raise unless the kernel's float32 expansion of `packed` is bitwise `reference`."""
    lib = native.library()
    expanded = torch.empty(np_ * k, dtype=torch.float32)
    lib.sb_expand(packed.data_ptr(), FORMATS[qtype], k, np_, expanded.data_ptr())
    if not torch.equal(expanded.view(torch.int32), reference.view(torch.int32)):
        raise RuntimeError(f"sbgemm: the {qtype} expansion differs from the float32 weight")
    fused = lib.sb_expand_fused(packed.data_ptr(), FORMATS[qtype], k, np_, expanded.data_ptr())
    if fused and not torch.equal(expanded.view(torch.int32), reference.view(torch.int32)):
        raise RuntimeError(f"sbgemm: the few-row {qtype} expansion differs from the float32 weight")
