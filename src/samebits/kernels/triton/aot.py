"""Ahead-of-time compiles of the Triton kernels for sm_90 on any machine, GPU or not (a
diagnostic for tests and benchmarks that read the TTGIR / PTX / SASS an H100 / H200 runs; no
launch path uses it).

Pointers are marked 16-byte aligned, as Triton's JIT specializes torch allocations, so the
layouts, vector widths and pipelining are those the GPU compiles.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


def signature(fn: Any, ptrs: dict[str, str], consts: dict, floats: Iterable[str] = ()) -> dict:
    """Triton signature of ``fn``: its constexprs (``consts``), pointers (names ending in
    ``_ptr``: ``ptrs``' type, else ``*fp32``), ``floats`` fp32 and every other argument i32."""
    floats = set(floats)

    def kind(name: str) -> str:
        if name in consts:
            return "constexpr"
        if name.endswith("_ptr"):
            return ptrs.get(name, "*fp32")
        return "fp32" if name in floats else "i32"

    return {name: kind(name) for name in fn.arg_names}


def compile_sm90(fn: Any, sig: dict, consts: dict, options: dict) -> Any:
    """``fn`` compiled for compute capability 9.0 (warp size 32) with launch ``options``
    (num_warps, num_stages, maxnreg, enable_fp_fusion ...); its ``asm`` holds ttgir, ptx and
    cubin."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    attrs = {(i,): [["tt.divisibility", 16]] for i, t in enumerate(sig.values())
             if t.startswith("*")}  # fmt: skip
    src = ASTSource(fn=fn, signature=sig, constexprs=consts, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)
