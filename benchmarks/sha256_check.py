"""Quick H200 check of the device SHA-256 (`kernels/triton/sha256.py`): compile time, time per
batch of rows, equality with hashlib, and how much a digest running on a side stream slows a
bf16 matmul chain on the main stream (a step's linears share the SMs with it).
`python benchmarks/sha256_check.py` (one JSON object per line on stdout)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import torch  # noqa: E402

from samebits.kernels.triton.sha256 import hex_digests, sha256_rows  # noqa: E402
from samebits.outputs import logits_digest  # noqa: E402


def _timed(fn) -> tuple[float, object]:
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, out


def check(rows_n: int, vocab: int, per_program: int = 32) -> dict:
    rows = torch.randn((rows_n, vocab), device="cuda")
    first, _ = _timed(lambda: sha256_rows(rows, per_program))
    again, words = _timed(lambda: sha256_rows(rows, per_program))
    got = hex_digests(words.cpu().numpy())
    host = rows.cpu().numpy()
    equal = sum(g == logits_digest(r) for g, r in zip(got, host, strict=True))
    return {"rows": rows_n, "vocab": vocab, "per_program": per_program, "first_s": first,
            "ms": again * 1e3, "equal": equal}  # fmt: skip


def interference(rows_n: int = 64, vocab: int = 128256, reps: int = 40) -> dict:
    """GPU ms (CUDA events on the main stream) of `reps` [64, 4096] x [4096, 14336] bf16
    matmuls alone, then with a digest of `rows_n` rows launched first on a side stream."""
    a = torch.randn((64, 4096), device="cuda", dtype=torch.bfloat16)
    w = torch.randn((4096, 14336), device="cuda", dtype=torch.bfloat16)
    rows = torch.randn((rows_n, vocab), device="cuda")
    side = torch.cuda.Stream()

    def chain(with_digest: bool) -> float:
        torch.cuda.synchronize()
        if with_digest:
            with torch.cuda.stream(side):
                sha256_rows(rows)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            torch.matmul(a, w)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end)

    chain(False)
    digest, _ = _timed(lambda: sha256_rows(rows))
    return {"matmuls_alone_ms": chain(False), "matmuls_with_digest_ms": chain(True),
            "digest_alone_ms": digest * 1e3, "rows": rows_n}  # fmt: skip


if __name__ == "__main__":
    print(json.dumps(check(70, 128256)), flush=True)
    for rows_n, vocab, per in (
        (64, 128256, 32),
        (64, 128256, 64),
        (256, 128256, 32),
        (256, 128256, 64),
        (256, 128256, 128),
        (64, 151937, 32),
    ):
        print(json.dumps(check(rows_n, vocab, per)), flush=True)
    print(json.dumps(interference()), flush=True)
