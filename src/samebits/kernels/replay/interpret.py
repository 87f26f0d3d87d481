"""The Triton interpreter made to compute what the CPU replay assumes of the GPU, so that the
shipped kernels run on a CPU give the GPU's bits (tests, and the GPU checks' ``--device cpu``
runs): ``tl.dot`` on bf16 is the sm_90 MMA chain (`cpu.mma_emu`, from the given accumulator),
``tl.fma`` one rounding of the exact a * b + c, the fp32 -> bf16 cast and bf16 constants round
to nearest even, the inline ``ex2.approx.ftz`` (`_softexp2.ex2_ftz`) the table of
`replay.ex2q` (on the 2^-12 grid `ex2q` feeds it; another input is an error). The GPU launches contract no multiply-add (``enable_fp_fusion=False``), nor
does the interpreter. Needs triton and the native MMA emulator."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from samebits.kernels.cpu import mma_emu
from samebits.kernels.replay.ex2q import ex2_ftz_grid
from samebits.kernels.replay.linear import fp32_to_bf16_bits
from samebits.kernels.replay.softexp import fma_f32

EX2_FTZ = "ex2.approx.ftz.f32 $0, $1;"  # `_softexp2.ex2_ftz`: defined on the 2^-12 grid only


def _bf16_handle(fp32: np.ndarray):
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    bits = np.ascontiguousarray(fp32, np.float32).view(np.uint32)
    return TensorHandle(fp32_to_bf16_bits(bits), tl.bfloat16)


def _builder_methods(real_trunc) -> dict:
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    def create_fma(self, x, y, z):
        return TensorHandle(fma_f32(x.data, y.data, z.data), z.dtype.scalar)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.dtype.scalar != tl.bfloat16 or b.dtype.scalar != tl.bfloat16:
            raise TypeError("the GPU-semantics interpreter emulates bf16 x bf16 MMAs only")
        acc = np.ascontiguousarray(d.data.astype(np.float32)).view(np.uint32)
        out = mma_emu.chain_bits(a.data, np.ascontiguousarray(b.data.T), acc)
        return TensorHandle(out.view(np.float32), d.dtype.scalar)

    def create_fp_trunc(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return _bf16_handle(src.data)
        return real_trunc(self, src, dst_type)

    def get_bf16(self, value):
        return _bf16_handle(np.array([value], np.float32))

    return dict(create_fma=create_fma, create_dot=create_dot, create_fp_trunc=create_fp_trunc,
                get_bf16=get_bf16, create_inline_asm=_create_inline_asm)  # fmt: skip


def _create_inline_asm(self, asm, constraints, values, types, is_pure, pack):
    """The interpreter's inline asm: `_softexp2.ex2_ftz` only, by the table of `replay.ex2q`."""
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    if asm != EX2_FTZ or len(values) != 1:
        raise NotImplementedError(f"interpreter: no stand-in for inline asm {asm!r}")
    return _Results([TensorHandle(ex2_ftz_grid(values[0].data), tl.float32)])


class _Results:
    """What the interpreter's inline asm returns: results by index."""

    def __init__(self, handles: list) -> None:
        self.handles = handles

    def get_result(self, i: int):
        return self.handles[i]


def gpu_semantics(setattr_: Callable[..., None] = setattr) -> None:
    """Patch the interpreter's builder (``setattr_``: e.g. pytest's ``monkeypatch.setattr``,
    which undoes it; the builtin: for the rest of the process)."""
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    for name, method in _builder_methods(builder.create_fp_trunc).items():
        setattr_(builder, name, method)


def ex2_stand_in(setattr_: Callable[..., None] = setattr) -> None:
    """Give Triton's interpreter (which runs no inline asm) the attention's ``ex2_ftz``: its
    GPU bits on the 2^-12 grid, from the table (any interpreted run of the attention kernels
    needs it; `gpu_semantics` includes it)."""
    from triton.runtime import interpreter

    setattr_(interpreter.InterpreterBuilder, "create_inline_asm", _create_inline_asm)


def numpy2_index() -> None:
    """Work around an interpreter / numpy 2.x incompatibility (for the rest of the process):
    scalars from ``tl.program_id`` or loaded values are 1-element arrays, which ``int()``
    rejects in numpy 2.x; ``__index__`` takes the single element instead."""
    from triton.runtime import interpreter

    stock = interpreter._patch_lang_tensor
    if getattr(stock, "numpy2_index", False):
        return

    def patch_lang_tensor(tensor, scope) -> None:
        stock(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    patch_lang_tensor.numpy2_index = True  # type: ignore[attr-defined]
    interpreter._patch_lang_tensor = patch_lang_tensor
