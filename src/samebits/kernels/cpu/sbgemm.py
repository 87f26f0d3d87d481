"""The samebits GEMM (sbgemm.c): a linear layer that is batch-invariant by construction.

Every output element is one SIMD lane running K fused multiply-adds in k order, so a row's
result never depends on the number of rows, its position, the vector width or how columns
are split between threads (see sbgemm.c). The C source is compiled once per machine with the
system C compiler into the user cache directory; `available()` says whether that worked (the
plan falls back to tiled MKL when it did not).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from functools import cache, lru_cache
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("sbgemm.c")
CFLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-ffp-contract=off")
# Below this many multiply-adds a call runs on the calling thread (thread hand-off costs more).
PARALLEL_MIN_MACS = 1 << 22


class BuildError(RuntimeError):
    """The C kernel could not be compiled or loaded on this machine."""


def _cache_dir() -> Path:
    import platformdirs

    return Path(os.environ.get("SAMEBITS_CACHE_DIR") or platformdirs.user_cache_dir("samebits"))


def _compiler() -> str:
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise BuildError("no C compiler (cc/gcc) found")
    return cc


@lru_cache(maxsize=1)
def build_key() -> str:
    """Identity of the compiled kernel: source, compiler version and flags (-march=native)."""
    cc = _compiler()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    blob = SOURCE.read_bytes() + version.encode() + " ".join(CFLAGS).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _build(cc: str) -> Path:
    target = _cache_dir() / f"sbgemm-{build_key()}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        proc = subprocess.run(
            [cc, *CFLAGS, str(SOURCE), "-o", str(out)], capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise BuildError(f"compiling {SOURCE.name} failed: {proc.stderr.strip()[:500]}")
        os.replace(out, target)
    return target


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """Compile (once per machine) and load the kernel; BuildError if impossible."""
    try:
        lib = ctypes.CDLL(str(_build(_compiler())))
    except OSError as exc:
        raise BuildError(f"loading the compiled kernel failed: {exc}") from exc
    lib.sb_gemm.argtypes = [ctypes.c_void_p, ctypes.c_long, ctypes.c_long, ctypes.c_void_p,
                            ctypes.c_long, ctypes.c_void_p, ctypes.c_long, ctypes.c_long]  # fmt: skip
    lib.sb_gemm.restype = None
    return lib


def available() -> bool:
    try:
        library()
    except BuildError:
        return False
    return True


def describe() -> str:
    lib = library()
    return f"sbgemm (vector width {lib.sb_vector_width()}, column tile {lib.sb_column_tile()})"


@cache
def _pool(threads: int) -> ThreadPoolExecutor:
    """One worker pool per thread count, shared by every layer."""
    return ThreadPoolExecutor(threads, thread_name_prefix="sbgemm")


class SbLinear:
    """y = x @ weight.T (+ bias), weight [N, K] float32; invariant by construction."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, num_threads: int):
        lib = library()
        n, k = weight.shape
        tile = lib.sb_column_tile()
        self.n, self.k, self.np = n, k, -(-n // tile) * tile
        wt = torch.zeros((k, self.np), dtype=torch.float32)
        wt[:, :n] = weight.t()
        self.wt = wt
        self.bias = bias
        self.tile = tile
        self.threads = max(1, num_threads)
        self._pool = _pool(self.threads) if self.threads > 1 else None

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.k)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        rows = x.shape[0]
        y = torch.empty((rows, self.np), dtype=torch.float32)
        if rows:
            self._run(x, y, rows)
        out = y[:, : self.n] if self.np != self.n else y
        return out + self.bias if self.bias is not None else out

    def _run(self, x: torch.Tensor, y: torch.Tensor, rows: int) -> None:
        fn = library().sb_gemm
        args = (x.data_ptr(), rows, self.k, self.wt.data_ptr(), self.np, y.data_ptr())
        if self._pool is None or rows * self.k * self.np < PARALLEL_MIN_MACS:
            fn(*args, 0, self.np)
            return
        blocks = self.np // self.tile
        cuts = [self.tile * (blocks * i // self.threads) for i in range(self.threads + 1)]
        jobs = [
            self._pool.submit(fn, *args, a, b)
            for a, b in zip(cuts, cuts[1:], strict=False)
            if a < b
        ]
        for job in jobs:
            job.result()
