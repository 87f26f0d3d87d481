"""Native (C) kernels of the invariant plan: sbgemm.c (linear) and sbattn.c (attention).

The C sources are compiled once per machine with the system C compiler (-march=native) into
the user cache directory and loaded with ctypes; `available()` says whether that worked (the
plan falls back to MKL tiles and numba attention when it did not). `build_key()` — a hash of
the sources, the compiler version and the flags — goes into the deployment fingerprint.
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

SOURCES = (Path(__file__).with_name("sbgemm.c"), Path(__file__).with_name("sbattn.c"))
CFLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-ffp-contract=off")
_L, _P, _F = ctypes.c_long, ctypes.c_void_p, ctypes.c_float


class BuildError(RuntimeError):
    """The C kernels could not be compiled or loaded on this machine."""


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
    """Identity of the compiled kernels: sources, compiler version and flags."""
    cc = _compiler()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    blob = b"".join(p.read_bytes() for p in SOURCES) + version.encode() + " ".join(CFLAGS).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _build(cc: str) -> Path:
    target = _cache_dir() / f"samebits-native-{build_key()}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        cmd = [cc, *CFLAGS, *map(str, SOURCES), "-o", str(out), "-lm"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"compiling the native kernels failed: {proc.stderr.strip()[:500]}")
        os.replace(out, target)
    return target


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """Compile (once per machine) and load the kernels; BuildError if impossible."""
    try:
        lib = ctypes.CDLL(str(_build(_compiler())))
    except (OSError, subprocess.SubprocessError) as exc:
        raise BuildError(f"loading the native kernels failed: {exc}") from exc
    lib.sb_gemm.argtypes = [_P, _L, _L, _P, _L, _P, _L, _L]
    lib.sb_gemm.restype = None
    lib.sb_attention.argtypes = [_P, _L, _L, _P, _P, _L, _P, _P, _P, _L, _L, _L, _F, _P, _L, _L]
    lib.sb_attention.restype = None
    lib.sb_attention_limits.argtypes = [_L, _L, _L]
    return lib


def available() -> bool:
    try:
        library()
    except BuildError:
        return False
    return True


@cache
def pool(threads: int) -> ThreadPoolExecutor:
    """One worker pool per thread count, shared by every native call."""
    return ThreadPoolExecutor(threads, thread_name_prefix="samebits-native")


def run_split(fn, args: tuple, total: int, threads: int, align: int = 1) -> None:
    """Call fn(*args, begin, end) over [0, total) cut into `threads` aligned ranges.

    Each output is computed entirely inside one range, so the split never changes a bit.
    """
    if threads <= 1 or total <= align:
        fn(*args, 0, total)
        return
    units = total // align
    cuts = [align * (units * i // threads) for i in range(threads)] + [total]
    jobs = [
        pool(threads).submit(fn, *args, a, b) for a, b in zip(cuts, cuts[1:], strict=False) if a < b
    ]
    for job in jobs:
        job.result()
