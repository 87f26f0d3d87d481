"""SHA-256 digests of logits rows on the GPU (`_sha256_kernel.py`): the same hex strings as
`samebits.outputs.logits_digest` of the rows copied to the host, computed where the rows are.

Evidence (test): equal to hashlib on the CPU interpreter (`tests/kernels/triton/
test_triton_sha256.py`: rows of every tail length, NaN, -0.0, infinities) and on the H200
(`tests/gpu/test_gpu_steps.py`, 128k-vocab rows).
"""

from __future__ import annotations

import numpy as np
import torch
import triton

from samebits.kernels.triton._sha256_kernel import sha256_rows_kernel

# One row per lane, two warps (64 rows) per program: on the H200 a lane's 64-round chain is
# latency bound (18-19 ms for a 128k-vocab row). Two warps of one program sit on one SM (in
# two of its four schedulers): half as many SMs share a decode step's kernels with a digest
# as with one-warp programs; `gpu_serving.py --digest-cost` 2026-12-01, (b) with digests
# 9,328 -> 9,482 tok/s, digest cost 2.5% -> 1.0%. 256 rows in one 8-warp program cut (a)
# from 7,376 to 1,974 tok/s (two warps per scheduler: each row twice as slow).
ROWS_PER_PROGRAM = 64


def _primes(n: int) -> list[int]:
    found: list[int] = []
    candidate = 2
    while len(found) < n:
        if all(candidate % p for p in found):
            found.append(candidate)
        candidate += 1
    return found


def _iroot(value: int, k: int) -> int:
    """floor(value ** (1/k)) for a non-negative int."""
    low, high = 0, 1 << (value.bit_length() // k + 1)
    while low < high:
        mid = (low + high + 1) // 2
        low, high = (mid, high) if mid**k <= value else (low, mid - 1)
    return low


def sha256_constants() -> np.ndarray:
    """K[0..63] (cube roots of the first 64 primes), H0[0..7] (square roots of the first 8),
    then the padding word 0x80000000: FIPS 180-4's definitions, as int32 bit patterns."""
    mask = (1 << 32) - 1
    ks = [_iroot(p << 96, 3) & mask for p in _primes(64)]
    hs = [_iroot(p << 64, 2) & mask for p in _primes(8)]
    return np.array(ks + hs + [0x80000000], dtype=np.uint32).view(np.int32)


_CONSTANTS: dict[torch.device, torch.Tensor] = {}


def sha256_rows(rows: torch.Tensor, per_program: int | None = None) -> torch.Tensor:
    """The SHA-256 state words [B, 8] (int32 bit patterns) of each float32 row of `rows`
    [B, V] (row-contiguous), queued on the current stream. `per_program` (32 times a power of
    two; default `ROWS_PER_PROGRAM`, read at the call) only spreads the rows over programs:
    the words never depend on it."""
    per_program = ROWS_PER_PROGRAM if per_program is None else per_program
    if rows.dtype != torch.float32 or rows.dim() != 2 or rows.stride(1) != 1:
        raise ValueError(f"sha256_rows needs row-contiguous float32 [B, V], got {rows.dtype}")
    device = rows.device
    if device not in _CONSTANTS:
        _CONSTANTS[device] = torch.from_numpy(sha256_constants()).to(device)
    out = torch.empty((rows.shape[0], 8), dtype=torch.int32, device=device)
    if rows.shape[0]:
        grid = (triton.cdiv(rows.shape[0], per_program),)
        sha256_rows_kernel[grid](
            rows.view(torch.int32), out, _CONSTANTS[device], rows.shape[0], rows.shape[1],
            rows.stride(0), BLOCK_R=per_program, num_warps=per_program // 32,
        )  # fmt: skip
    return out


def warm_up(device: torch.device) -> None:
    """Compile the kernel now (a few seconds on the H200): the engine calls this at start, so
    no step waits for the compiler. Its integer arguments are not specialized, so this one
    binary serves every row count, vocabulary and stride."""
    sha256_rows(torch.zeros((1, 64), dtype=torch.float32, device=device))
    torch.cuda.synchronize(device)


def hex_digests(words: np.ndarray) -> list[str]:
    """Hex digests of `sha256_rows`'s output copied to the host ([B, 8] int32)."""
    big_endian = np.ascontiguousarray(words).view(np.uint32).astype(">u4")
    return [row.tobytes().hex() for row in big_endian]
