"""Native emulator of the H200 bf16 tensor-core chain (mma_emu.c): the exact fp32 bits of
`acc = mma_k16(x[:, k0:k0+16], w[:, k0:k0+16], acc)` over k, for x [M, K] and w [N, K].

The step's definition is mma_model.py (numpy reference); mma_emu.c computes the same bits
(test: tests/kernels/test_mma_emu.py; GPU agreement: benchmarks/mma_validate.py). The C source
is compiled once per machine like the other native kernels (native.py's compiler, flags and
cache directory) into its own library, so the engine's kernels and their build key are
untouched. Without a C compiler `mma_chain` falls back to the numpy model, with a warning.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
import tempfile
import warnings
import weakref
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from samebits.kernels.cpu import mma_model
from samebits.kernels.cpu.mma_model import DEFAULT, STEP, MmaModel

_HERE = Path(__file__).parent
SOURCES = (_HERE / "mma_emu.c", _HERE / "replay_attn.c", _HERE / "sbpool.c")
HEADERS = (_HERE / "sbpool.h",)
_P, _L = ctypes.c_void_p, ctypes.c_long


@lru_cache(maxsize=1)
def build_key() -> str:
    """Identity of the compiled emulator: sources, compiler version and flags."""
    from samebits.kernels.cpu import native

    version = subprocess.run([native._compiler(), "--version"], capture_output=True, text=True)
    blob = b"".join(p.read_bytes() for p in SOURCES + HEADERS)
    blob += version.stdout.encode() + " ".join(native.CFLAGS).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def _cache_dir() -> Path:
    """$SAMEBITS_CACHE_DIR, else the user cache directory (platformdirs), as native.py."""
    if os.environ.get("SAMEBITS_CACHE_DIR"):
        return Path(os.environ["SAMEBITS_CACHE_DIR"])
    import platformdirs

    return Path(platformdirs.user_cache_dir("samebits"))


def _build() -> Path:
    from samebits.kernels.cpu import native

    isa = hashlib.sha256(native.isa_flags().encode()).hexdigest()[:8]
    target = _cache_dir() / f"samebits-mma-{build_key()}-{isa}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        out = Path(tmp) / target.name
        cmd = [native._compiler(), *native.CFLAGS, f"-I{_HERE}", *map(str, SOURCES)]
        proc = subprocess.run([*cmd, "-o", str(out), "-lm"], capture_output=True, text=True)
        if proc.returncode != 0:
            raise native.BuildError(f"compiling mma_emu.c failed: {proc.stderr.strip()[:500]}")
        os.replace(out, target)
    return target


@lru_cache(maxsize=1)
def library() -> ctypes.CDLL:
    """Compile (once per machine) and load the emulator; native.BuildError if impossible."""
    from samebits.kernels.cpu import native

    try:
        lib = ctypes.CDLL(str(_build()))
    except (OSError, subprocess.SubprocessError) as exc:
        raise native.BuildError(f"loading mma_emu failed: {exc}") from exc
    lib.sb_mma_chain.argtypes = [_P, _L, _P, _L, _L, _P, _P, _L, _L]
    lib.sb_mma_chain.restype = ctypes.c_int
    lib.sb_mma_step_scalar.argtypes = [_P, _L, _P, _L, _P, _P, _L]
    lib.sb_mma_step_scalar.restype = None
    lib.sb_mma_decode_weight.argtypes = [_P, _L, _L, _L, _L]
    lib.sb_mma_decode_weight.restype = _P
    lib.sb_mma_free_weight.argtypes = [_P]
    lib.sb_mma_free_weight.restype = None
    lib.sb_mma_chain_decoded.argtypes = [_P, _L, _P, _P, _P, _L]
    lib.sb_mma_chain_decoded.restype = ctypes.c_int
    lib.sb_replay_attention.argtypes = [_P, _L, _L, _L, _P, _P, _L, _L, _P, _L, _L,
                                        ctypes.c_uint32, _P, _L, _L, _P, _L]  # fmt: skip
    lib.sb_replay_attention.restype = ctypes.c_int
    return lib


@lru_cache(maxsize=1)
def build_error() -> str | None:
    """Why the emulator cannot be built or loaded here; None if it can."""
    from samebits.kernels.cpu import native

    try:
        library()
    except native.BuildError as exc:
        return str(exc)
    return None


def available() -> bool:
    return build_error() is None


def chain_bits(
    x: np.ndarray, w: np.ndarray, acc: np.ndarray | None = None,
    model: MmaModel = DEFAULT, threads: int | None = None,
) -> np.ndarray:  # fmt: skip
    """The chain on bits: x [M,K], w [N,K] bf16 bits (uint16/int16), acc [M,N] fp32 bits
    (uint32) or None (+0) -> uint32 [M,N]. Native when available, else the numpy model."""
    x, w = mma_model._check(x, w)
    m, n = x.shape[0], w.shape[0]
    if acc is not None:
        acc = np.ascontiguousarray(acc).view(np.uint32)
        if acc.shape != (m, n):
            raise ValueError(f"mma_chain: acc must be [{m}, {n}], got {acc.shape}")
    if not available():
        warnings.warn(
            f"mma_emu: native emulator unavailable ({build_error()}); numpy model used",
            stacklevel=2,
        )
        return mma_model.mma_chain(x, w, acc, model)
    x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
    out = np.empty((m, n), np.uint32)
    if m and n:
        acc_ptr = None if acc is None else acc.ctypes.data
        rc = library().sb_mma_chain(
            x.ctypes.data, m, w.ctypes.data, n, x.shape[1], acc_ptr, out.ctypes.data,
            model.flags(), threads or cores(),
        )  # fmt: skip
        if rc != 0:
            raise MemoryError("mma_chain: out of memory decoding the operands")
    return out


def cores() -> int:
    """CPUs this process may run on (the default thread count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def mma_chain(
    x_bf16: Any, w_bf16: Any, acc_fp32: Any = None,
    model: MmaModel = DEFAULT, threads: int | None = None,
) -> Any:  # fmt: skip
    """fp32 result of the H200 bf16 MMA chain of x [M,K] and w [N,K] from acc [M,N] (None: +0).

    Takes torch bfloat16/float32 tensors (returns a torch float32 tensor) or numpy bit arrays
    (uint16 for bf16, float32/uint32 for acc; returns numpy float32).
    """
    if _is_torch(x_bf16):
        import torch

        bits = [_torch_bits(t, torch.bfloat16, torch.int16) for t in (x_bf16, w_bf16)]
        acc = None if acc_fp32 is None else _torch_bits(acc_fp32, torch.float32, torch.int32)
        out = chain_bits(bits[0], bits[1], acc, model, threads)
        return torch.from_numpy(out.view(np.float32))
    acc = None if acc_fp32 is None else np.asarray(acc_fp32)
    if acc is not None and acc.dtype not in (np.float32, np.uint32, np.int32):
        raise TypeError(f"mma_chain: acc must be float32 or its uint32 bits, got {acc.dtype}")
    return chain_bits(_np_bits(x_bf16), _np_bits(w_bf16), acc, model, threads).view(np.float32)


def _np_bits(a: Any) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype not in (np.uint16, np.int16):
        raise TypeError(f"mma_chain: bf16 operands are uint16/int16 bit arrays, got {a.dtype}")
    return a.view(np.uint16)


def _is_torch(a: Any) -> bool:
    return type(a).__module__.startswith("torch")


def _torch_bits(t: Any, dtype: Any, view: Any) -> np.ndarray:
    if t.dtype != dtype:
        raise TypeError(f"mma_chain: expected a {dtype} tensor, got {t.dtype}")
    return t.detach().cpu().contiguous().view(view).numpy()


def step_scalar_bits(x: np.ndarray, w: np.ndarray, acc: np.ndarray, flags: int) -> np.ndarray:
    """One k16 step by the native scalar path (tests): x [M,16], w [N,16], acc [M,N] bits."""
    x, w = (np.ascontiguousarray(a, np.uint16) for a in (x, w))
    acc = np.ascontiguousarray(acc, np.uint32)
    if x.shape[1] != STEP or w.shape[1] != STEP or acc.shape != (x.shape[0], w.shape[0]):
        raise ValueError("step_scalar_bits: x [M,16], w [N,16], acc [M,N] expected")
    out = np.empty_like(acc)
    library().sb_mma_step_scalar(
        x.ctypes.data, x.shape[0], w.ctypes.data, w.shape[0], acc.ctypes.data, out.ctypes.data,
        flags,
    )  # fmt: skip
    return out


class DecodedWeight:
    """w [N, K] (bf16 bits) decoded once by the native emulator for many chains.

    Invariant: ``chain(x, acc)`` gives the bits of ``chain_bits(x, w, acc, model)`` (test).
    The decoded form takes 8 bytes per weight element. Without the native emulator the bits
    are kept and every chain runs the numpy model, with a warning (as ``chain_bits``).
    """

    def __init__(self, w: np.ndarray, model: MmaModel = DEFAULT, threads: int | None = None):
        w = np.asarray(w)
        if w.ndim != 2 or w.shape[1] % STEP or w.dtype not in (np.uint16, np.int16):
            raise ValueError(f"DecodedWeight: w [N, K] bf16 bits, K % 16 == 0; got {w.shape}")
        self.bits = np.ascontiguousarray(w.view(np.uint16))
        self.model = model
        self.shape: tuple[int, int] = (int(w.shape[0]), int(w.shape[1]))
        self._handle: int | None = None
        if available() and w.size:
            self._handle = library().sb_mma_decode_weight(
                self.bits.ctypes.data, self.shape[0], self.shape[1], model.flags(),
                threads or cores(),
            )  # fmt: skip
            if not self._handle:
                raise MemoryError("DecodedWeight: out of memory decoding the weight")
            weakref.finalize(self, library().sb_mma_free_weight, self._handle)

    def chain(
        self, x: np.ndarray, acc: np.ndarray | None = None, threads: int | None = None
    ) -> np.ndarray:
        """The chain of x [M, K] (bf16 bits) from acc [M, N] (fp32 bits; None: +0): uint32."""
        if self._handle is None:
            return chain_bits(x, self.bits, acc, self.model, threads)
        x, _ = mma_model._check(x, self.bits[:0])
        m, n = x.shape[0], self.shape[0]
        if acc is not None:
            acc = np.ascontiguousarray(acc).view(np.uint32)
            if acc.shape != (m, n):
                raise ValueError(f"mma_chain: acc must be [{m}, {n}], got {acc.shape}")
        x = np.ascontiguousarray(x)
        out = np.empty((m, n), np.uint32)
        if m:
            acc_ptr = None if acc is None else acc.ctypes.data
            rc = library().sb_mma_chain_decoded(
                x.ctypes.data, m, self._handle, acc_ptr, out.ctypes.data, threads or cores()
            )
            if rc != 0:
                raise MemoryError("mma_chain: out of memory decoding x")
        return out
