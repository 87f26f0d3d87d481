"""Native (C) kernels of the invariant plan: sbgemm.c (linear), sbattn.c (attention) and
sbrow.c (RMSNorm, SiLU-mul), all running their threads on the worker pool of sbpool.c.

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
from functools import lru_cache
from pathlib import Path

_HERE = Path(__file__).parent
SOURCES = tuple(_HERE / name for name in ("sbgemm.c", "sbattn.c", "sbrow.c", "sbpool.c"))
HEADERS = (_HERE / "sbpool.h", _HERE / "sbexp.h")
CFLAGS = ("-O3", "-march=native", "-fPIC", "-shared", "-ffp-contract=off", "-pthread")
_L, _P, _F, _D = ctypes.c_long, ctypes.c_void_p, ctypes.c_float, ctypes.c_double


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
    blob = (
        b"".join(p.read_bytes() for p in SOURCES + HEADERS)
        + version.encode()
        + " ".join(CFLAGS).encode()
    )
    return hashlib.sha256(blob).hexdigest()[:16]


def _build(cc: str) -> Path:
    target = _cache_dir() / f"samebits-native-{build_key()}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        cmd = compile_command(cc, CFLAGS, out)
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"compiling the native kernels failed: {proc.stderr.strip()[:500]}")
        os.replace(out, target)
    return target


def compile_command(cc: str, flags: tuple[str, ...], out: Path) -> list[str]:
    """The compiler command line that builds the kernels into the shared library `out`."""
    return [cc, *flags, f"-I{_HERE}", *map(str, SOURCES), "-o", str(out), "-lm"]


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """Compile (once per machine) and load the kernels; BuildError if impossible."""
    try:
        lib = ctypes.CDLL(str(_build(_compiler())))
    except (OSError, subprocess.SubprocessError) as exc:
        raise BuildError(f"loading the native kernels failed: {exc}") from exc
    declare(lib)
    return lib


def declare(lib: ctypes.CDLL) -> None:
    """Argument types of the kernels' entry points."""
    lib.sb_gemm.argtypes = [_P, _L, _L, _P, _L, _L, _P, _L]
    lib.sb_gemm.restype = None
    lib.sb_expand.argtypes = [_P, _L, _L, _L, _P]
    lib.sb_expand.restype = None
    lib.sb_attention.argtypes = [_P, _L, _L, _P, _P, _L, _P, _P, _P, _L, _L, _L, _F, _P, _L, _L]
    lib.sb_attention.restype = None
    lib.sb_attention_limits.argtypes = [_L, _L, _L]
    lib.sb_silu_mul.argtypes = [_P, _L, _L, _P, _L]
    lib.sb_silu_mul.restype = None
    lib.sb_rms_norm.argtypes = [_P, _L, _L, _P, _D, _P, _L]
    lib.sb_rms_norm.restype = None
    lib.sb_add_rms_norm.argtypes = [_P, _P, _L, _L, _P, _D, _P, _L]
    lib.sb_add_rms_norm.restype = None


def available() -> bool:
    try:
        library()
    except BuildError:
        return False
    return True
