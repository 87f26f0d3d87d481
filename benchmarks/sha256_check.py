"""Quick H200 check of the device SHA-256 (`kernels/triton/sha256.py`): compile time, time per
batch of rows, and equality with hashlib. `python benchmarks/sha256_check.py` (JSON on stdout)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import torch  # noqa: E402

from samebits.kernels.triton.sha256 import hex_digests, sha256_rows  # noqa: E402
from samebits.outputs import logits_digest  # noqa: E402


def check(rows_n: int, vocab: int) -> dict:
    rows = torch.randn((rows_n, vocab), device="cuda")
    start = time.perf_counter()
    words = sha256_rows(rows)
    torch.cuda.synchronize()
    first = time.perf_counter() - start
    start = time.perf_counter()
    words = sha256_rows(rows)
    torch.cuda.synchronize()
    again = time.perf_counter() - start
    got = hex_digests(words.cpu().numpy())
    host = rows.cpu().numpy()
    equal = sum(g == logits_digest(r) for g, r in zip(got, host, strict=True))
    return {"rows": rows_n, "vocab": vocab, "first_s": first, "ms": again * 1e3, "equal": equal}


if __name__ == "__main__":
    out = [check(70, 128256)]
    print(json.dumps(out[-1]), flush=True)
    out += [check(256, 128256), check(64, 151937)]
    print(json.dumps(out))
