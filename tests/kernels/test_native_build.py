"""A native build that fails is announced (a warning with the compiler's reason, a line of the
plan's description) and stays out of the fingerprint; the cached library is keyed by the CPU's
instruction-set flags."""

from __future__ import annotations

import shutil

import pytest

from samebits.kernels.cpu import native
from samebits.kernels.plan import build_plan


def _clear_caches() -> None:
    for cached in (native.library, native.build_error, native.build_key):
        cached.cache_clear()


@pytest.fixture
def fresh_native(monkeypatch, tmp_path):
    """An empty library cache and no memo of an earlier build; restored afterwards."""
    monkeypatch.setenv("SAMEBITS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SAMEBITS_LINEAR_KERNEL", raising=False)
    _clear_caches()
    yield monkeypatch
    monkeypatch.undo()
    _clear_caches()


def test_failed_build_is_announced(fresh_native, tmp_path):
    compiler = tmp_path / "broken-cc"
    compiler.write_text('#!/bin/sh\necho "broken-cc: cannot compile $*" >&2\nexit 1\n')
    compiler.chmod(0o755)
    fresh_native.setenv("CC", str(compiler))
    with pytest.warns(RuntimeWarning, match="native C kernels are unavailable.*broken-cc"):
        plan = build_plan("invariant", 1)
    assert (plan.linear_kernel, plan.attention_kernel) == ("mkl-tiles", "numba")
    assert "broken-cc: cannot compile" in plan.native_fallback
    assert "failed to build" in plan.describe() and "broken-cc" in plan.describe()
    assert "native_fallback" not in plan.to_dict()  # the fingerprint has linear_kernel
    with pytest.raises(native.BuildError, match="broken-cc"):
        build_plan("invariant", 1, linear_kernel="sbgemm")


def test_missing_header_is_reported(fresh_native, tmp_path):
    here = tmp_path / "kernels"
    here.mkdir()
    for path in native.SOURCES + native.HEADERS[1:]:
        shutil.copy2(path, here / path.name)
    fresh_native.setattr(native, "_HERE", here)
    fresh_native.setattr(native, "SOURCES", tuple(here / p.name for p in native.SOURCES))
    fresh_native.setattr(native, "HEADERS", tuple(here / p.name for p in native.HEADERS))
    assert native.HEADERS[0].name in (native.build_error() or "")
    assert not native.available()


def test_deliberate_mkl_tiles_is_not_a_fallback(fresh_native, recwarn):
    plan = build_plan("invariant", 1, linear_kernel="mkl-tiles")
    assert plan.linear_kernel == "mkl-tiles" and not plan.native_fallback
    assert not [w for w in recwarn if "samebits" in str(w.message)]


def test_cache_key_includes_isa_flags(monkeypatch):
    """Same sources, compiler and flags on a CPU with other instruction sets: another library
    file (-march=native code may not run there), the same build key (fingerprint)."""
    assert native.isa_flags()
    key, build = native.cache_key(), native.build_key()
    assert key.startswith(build)
    monkeypatch.setattr(native, "isa_flags", lambda: "fma sse2 avx2")
    assert native.cache_key() != key and native.build_key() == build
