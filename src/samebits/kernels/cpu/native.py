"""Native (C) kernels of the invariant plan: sbgemm.c (linear), sbattn.c (attention),
sbrow.c (RMSNorm, SiLU-mul) and sblayer.c (a decoder layer calling them), all running their
threads on the worker pool of sbpool.c.

The C sources are compiled once per machine with the system C compiler (-march=native) into
the user cache directory and loaded with ctypes; `available()` says whether that worked and
`build_error()` why not (the plan then falls back to MKL tiles and numba attention, and says
so: a warning and a line of the plan's description). `build_key()` — a hash of the sources,
the compiler version and the flags — goes into the deployment fingerprint; the cached library's
name adds the CPU's instruction-set flags (`cache_key()`), so a cache directory shared between
machines never loads a library that -march=native built for another CPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from functools import lru_cache
from pathlib import Path

_HERE = Path(__file__).parent
SOURCES = tuple(
    _HERE / name for name in ("sbgemm.c", "sbattn.c", "sbrow.c", "sblayer.c", "sbpool.c")
)
HEADERS = (_HERE / "sbpool.h", _HERE / "sbexp.h", _HERE / "sbprefetch.h")
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


@lru_cache(maxsize=1)
def isa_flags() -> str:
    """The CPU's instruction-set flags (/proc/cpuinfo "flags", or "Features" on ARM), sorted;
    the machine and processor names where that file is not readable."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return " ".join(sorted(value.split()))
    except OSError:
        pass
    return f"{platform.machine()} {platform.processor()}"


def cache_key() -> str:
    """Name of the compiled library in the cache: `build_key()` plus the CPU's ISA flags."""
    isa = hashlib.sha256(isa_flags().encode()).hexdigest()[:8]
    return f"{build_key()}-{isa}"


def _build(cc: str) -> Path:
    missing = [p.name for p in SOURCES + HEADERS if not p.is_file()]
    if missing:
        raise BuildError(f"kernel sources missing from {_HERE}: {', '.join(missing)}")
    target = _cache_dir() / f"samebits-native-{cache_key()}.so"
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
    lib.sb_expand_fused.argtypes = [_P, _L, _L, _L, _P]
    lib.sb_expand_fused.restype = ctypes.c_int
    lib.sb_gemm_prefetching.argtypes = [_P, _L, _L, _P, _L, _L, _P, _L, _P]
    lib.sb_gemm_prefetching.restype = None
    lib.sb_gemm_split.argtypes = [_P, _L, _L, _P, _L, _L, _P, _L, _P, _L, _L]
    lib.sb_gemm_split.restype = None
    lib.sb_layer_set_prefetch.argtypes = [_L]
    lib.sb_layer_set_prefetch.restype = None
    lib.sb_gemm_set_fused_max_rows.argtypes = [_L]
    lib.sb_gemm_set_fused_max_rows.restype = None
    attention = [_P, _L, _L, _P, _P, _L, _P, _P, _P, _L, _L, _L, _L, _F, _P, _L, _L]
    lib.sb_attention.argtypes = attention
    lib.sb_attention.restype = None
    lib.sb_attention_window.argtypes = attention + [_L]
    lib.sb_attention_window.restype = None
    lib.sb_attention_states.argtypes = attention
    lib.sb_attention_states.restype = _L
    lib.sb_attention_limits.argtypes = [_L, _L, _L, _L]
    lib.sb_attention_set_grouped.argtypes = [_L]
    lib.sb_attention_set_grouped.restype = None
    lib.sb_attention_set_split.argtypes = [_L]
    lib.sb_attention_set_split.restype = None
    lib.sb_attention_exp.argtypes = [_P, _L, _P]
    lib.sb_attention_exp.restype = None
    lib.sb_silu_mul.argtypes = [_P, _L, _L, _P, _L]
    lib.sb_silu_mul.restype = None
    lib.sb_gelu_mul.argtypes = [_P, _L, _L, _P, _L]
    lib.sb_gelu_mul.restype = None
    lib.sb_rms_norm.argtypes = [_P, _L, _L, _P, _D, _P, _L]
    lib.sb_rms_norm.restype = None
    lib.sb_add_rms_norm.argtypes = [_P, _P, _L, _L, _P, _D, _P, _L]
    lib.sb_add_rms_norm.restype = None


@lru_cache(maxsize=1)
def build_error() -> str | None:
    """Why the kernels cannot be built or loaded here (the compiler's reason); None if they can.
    Tried once per process."""
    try:
        library()
    except BuildError as exc:
        return str(exc)
    return None


def available() -> bool:
    return build_error() is None
