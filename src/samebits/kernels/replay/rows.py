"""The GPU plan's row kernels on the CPU, bit for bit (kernels/triton/_row_kernels.py,
_fused_kernels.py, the soft-exp SiLU / GeGLU of _row_kernels.py / _gelu_kernel.py,
kernels/moe.py routing and combine).

Values in and out: bf16 as uint16 bits, fp32 as float32 (or uint32 bits). Definitions read
from the sm_90 compilation (TTGIR / PTX, Triton 3.6; benchmarks/ptx_survey_aot.py and
docs/cpu_replay.md); each is checked on the H200 by benchmarks/replay_rows_check.py.

RMSNorm (``_rms_apply``): ``sum(r * r)`` is Triton's reduction for the launch's layout, a
function of the width only (:func:`rms_layout`): BLOCK = next_pow2(width), W warps
(`rows.row_num_warps`), ``s = min(8, BLOCK / (32 W))`` consecutive elements per thread
(pointers 16-byte aligned: the JIT's divisibility specialization), R = BLOCK / (32 W) values
per thread; element ``j*s*32W + t*s + k`` is register ``j*s + k`` of thread t. Per thread,
``acc = fma(e0, e0, e1*e1)`` then ``acc = fma(ei, ei, acc)`` in register order (the
contraction LLVM makes: 15 ``fma.rn.f32`` at width 4096); then a butterfly over the lanes
(``v += shfl_xor(v, o)``, o = L/2 .. 1) and, for W > 1, the same over the W warp partials.
With one value per thread (BLOCK <= 32) the first butterfly level is contracted too,
``v_l = fma(e_l, e_l, round(e_{l^o}^2))``, and each lane keeps its own sum: element i's
inverse uses lane i's. Masked lanes hold +0. Then ``mean = div_rn(sum, WIDTH)``, ``inv =
div_rn(1, sqrt_rn(mean + eps))``, ``(r * inv) * w`` (w fp32), the cast.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from samebits.kernels.replay.linear import fp32_to_bf16_bits, sum_add_residual
from samebits.kernels.replay.softexp import (
    add_f32,
    canon,
    div_rn,
    f32,
    fma_f32,
    mul_f32,
    softexp,
    sqrt_rn,
)

OUT_DTYPES = ("bfloat16", "float32")
GELU_K1 = np.float32(1.5957691216057308)
GELU_K2 = np.float32(0.07135481627260025)


def widen(a) -> np.ndarray:
    """fp32 values of bf16 bits (uint16), fp32 bits (uint32) or float32 values."""
    a = np.asarray(a)
    if a.dtype == np.uint16:
        return (a.astype(np.uint32) << np.uint32(16)).view(np.float32)
    if a.dtype in (np.uint32, np.float32):
        return f32(a)
    raise ValueError(f"replay: expected bf16 bits (uint16) or fp32, got {a.dtype}")


def cast(y: np.ndarray, out_dtype: str) -> np.ndarray:
    """fp32 -> output bits: uint16 (bf16, round to nearest even, NaN 0x7FFF) or uint32."""
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"replay: out_dtype must be one of {OUT_DTYPES}, got {out_dtype!r}")
    bits = canon(y).view(np.uint32)
    return bits.copy() if out_dtype == "float32" else fp32_to_bf16_bits(bits)


@dataclass(frozen=True)
class RowLayout:
    """The reduction layout of one RMSNorm launch (a function of the width only)."""

    width: int
    block: int
    warps: int
    size_per_thread: int

    @property
    def lanes(self) -> int:
        return min(32, self.block // self.size_per_thread)

    @property
    def per_thread(self) -> int:
        return self.block // (self.lanes * self.warps)


def rms_layout(width: int) -> RowLayout:
    """The layout Triton 3.6 gives ``_rms_apply``'s ``tl.sum`` at this width on sm_90."""
    if width < 1:
        raise ValueError(f"replay: row width must be >= 1, got {width}")
    block = 1 << (width - 1).bit_length()
    warps = min(8, max(1, block // 256))
    return RowLayout(width, block, warps, min(8, max(1, block // (32 * warps))))


def _registers(r: np.ndarray, lay: RowLayout) -> np.ndarray:
    """[M, W, L, R]: thread (w, l)'s values in register order (zeros past the width)."""
    m = r.shape[0]
    pad = np.zeros((m, lay.block), np.float32)
    pad[:, : lay.width] = r
    s, threads = lay.size_per_thread, lay.lanes * lay.warps
    reps = lay.per_thread // s
    regs = pad.reshape(m, reps, threads, s).transpose(0, 2, 1, 3)  # [M, T, reps, s]
    return regs.reshape(m, lay.warps, lay.lanes, reps * s)


def _butterfly(v: np.ndarray, width: int, first: int | None = None) -> np.ndarray:
    """``v += shfl_xor(v, o)`` for o = first (default width/2), first/2, .., 1 (last axis)."""
    o = width // 2 if first is None else first
    while o >= 1:
        v = add_f32(v, v[..., np.arange(width) ^ o])
        o //= 2
    return v


def sum_squares(r: np.ndarray, lay: RowLayout) -> np.ndarray:
    """[M, width]: the ``tl.sum(r * r)`` each element's program lane uses (see module doc)."""
    regs = _registers(f32(r), lay)
    if lay.per_thread == 1:  # BLOCK <= 32: one warp, one value per lane, per-lane sums
        e, lanes = regs[:, 0, :, 0], lay.lanes
        if lanes == 1:
            return mul_f32(e, e)
        v = fma_f32(e, e, mul_f32(e, e)[:, np.arange(lanes) ^ (lanes // 2)])
        return _butterfly(v, lanes, lanes // 4)[:, : lay.width]
    acc = fma_f32(regs[..., 0], regs[..., 0], mul_f32(regs[..., 1], regs[..., 1]))
    for i in range(2, regs.shape[-1]):
        acc = fma_f32(regs[..., i], regs[..., i], acc)
    warp = _butterfly(acc, lay.lanes)[:, :, 0]  # [M, W]: every lane holds the warp's sum
    total = _butterfly(warp, lay.warps)[:, 0]
    return np.repeat(total[:, None], lay.width, axis=1)


def rms_apply(r, weight, eps: float, out_dtype: str = "bfloat16") -> np.ndarray:
    """``_rms_apply`` on rows r [M, width] (fp32) with fp32 weight [width]: output bits."""
    r = f32(r)
    if r.ndim != 2:
        raise ValueError(f"replay: rows must be [M, width], got {r.shape}")
    w = widen(weight)
    if w.shape != (r.shape[1],):
        raise ValueError(f"replay: weight must be [{r.shape[1]}], got {w.shape}")
    lay = rms_layout(r.shape[1])
    mean = div_rn(sum_squares(r, lay), np.float32(lay.width))
    inv = div_rn(np.float32(1.0), sqrt_rn(add_f32(mean, np.float32(eps))))
    return cast(mul_f32(mul_f32(r, inv), w[None, :]), out_dtype)


def rms_norm(x, weight, eps: float, out_dtype: str = "bfloat16") -> np.ndarray:
    """``rows.rms_norm``: x [M, H] (bf16 bits or fp32) -> output bits."""
    return rms_apply(widen(x), weight, eps, out_dtype)


def add_rms_norm(x, residual, weight, eps: float, out_dtype: str = "bfloat16"):
    """``rows.add_rms_norm``: (output bits, new fp32 residual ``residual + float32(x)``)."""
    res = add_f32(f32(residual), widen(x))
    return rms_apply(res, weight, eps, out_dtype), res


def head_rms_norm(x, weight, eps: float) -> np.ndarray:
    """``rows.head_rms_norm``: x [M, heads, D] bf16 bits -> the same shape, RMSNorm over D."""
    x = np.asarray(x)
    if x.ndim != 3:
        raise ValueError(f"replay: head_rms_norm needs [M, heads, D], got {x.shape}")
    flat = rms_apply(widen(x).reshape(-1, x.shape[2]), weight, eps, "bfloat16")
    return flat.reshape(x.shape)


def sum_add_rms_norm(partials, bias, residual, weight, eps: float, out_dtype="bfloat16"):
    """``sum_add_rms_norm_kernel``: (linear output bits, new residual, normed output bits)."""
    out, res = sum_add_residual(partials, bias, residual, out_dtype)
    return out, res, rms_apply(res, weight, eps, out_dtype)


def _rotate(a: np.ndarray, b: np.ndarray, c: np.ndarray, s: np.ndarray):
    """``_rope_heads``' arithmetic as compiled: ``a*c - b*s`` -> ``fma(a, c, -(b*s))``, ``b*c
    + a*s`` -> ``fma(a, s, b*c)`` (PTX: one product kept, the other fused)."""
    lo = fma_f32(a, c, -mul_f32(b, s))
    hi = fma_f32(a, s, mul_f32(b, c))
    return lo, hi


def rope(x, positions, cos, sin) -> np.ndarray:
    """``rows.rope``: x [M, heads, D] bf16 bits, rotate-half at ``positions`` with fp32
    tables [P, D/2] (`model.rope_tables`) -> bf16 bits of the same shape."""
    x = np.asarray(x)
    if x.dtype != np.uint16 or x.ndim != 3 or x.shape[2] % 2:
        raise ValueError(f"replay: rope needs bf16 bits [M, heads, D] with D even, got {x.shape}")
    half = x.shape[2] // 2
    pos = np.asarray(positions, np.int64)
    c, s = f32(cos)[pos][:, None, :], f32(sin)[pos][:, None, :]
    if c.shape[-1] != half:
        raise ValueError(f"replay: rope tables must be [P, {half}]")
    v = widen(x)
    lo, hi = _rotate(v[..., :half], v[..., half:], c, s)
    return cast(np.concatenate([lo, hi], axis=-1), "bfloat16")


def qkv_rope_store(qkv, positions, cos, sin, heads: int, kv_heads: int):
    """``rows.qkv_rope_store``: qkv [M, (heads + 2 kv) D] bf16 bits -> (q [M, heads, D], the
    K rows and V rows [M, kv, D] written to the tokens' slots); v's bits unchanged."""
    qkv = np.asarray(qkv)
    m, width = qkv.shape
    d = width // (heads + 2 * kv_heads)
    if d * (heads + 2 * kv_heads) != width:
        raise ValueError(f"replay: qkv width {width} is not (heads + 2 kv) * D")
    q = qkv[:, : heads * d].reshape(m, heads, d)
    k = qkv[:, heads * d : (heads + kv_heads) * d].reshape(m, kv_heads, d)
    v = qkv[:, (heads + kv_heads) * d :].reshape(m, kv_heads, d)
    return rope(q, positions, cos, sin), rope(k, positions, cos, sin), v.copy()


def _halves(gate_up) -> tuple[np.ndarray, np.ndarray]:
    gu = np.asarray(gate_up)
    if gu.dtype not in (np.uint16, np.float32) or gu.ndim != 2 or gu.shape[1] % 2:
        raise ValueError(f"replay: gate_up must be bf16 bits or fp32 [M, 2I], got {gu.shape}")
    inner = gu.shape[1] // 2
    return widen(gu[:, :inner]), widen(gu[:, inner:])


def silu_mul(gate_up, out_dtype: str = "bfloat16") -> np.ndarray:
    """`silu_mul_kernel`: ``div_rn(g, 1 + softexp(-g)) * u``, bf16 bits [M, I]."""
    g, u = _halves(gate_up)
    silu = div_rn(g, add_f32(np.float32(1.0), softexp(add_f32(np.float32(0.0), -g))))
    return cast(mul_f32(silu, u), out_dtype)


def gelu_neg_z(g: np.ndarray) -> np.ndarray:
    """``-z = -(g * (K1 + K2 * (g * g)))`` as the kernel states it (and as the PTX of the
    earlier kernel contracted it): ``q = fma(g*g, K2, K1)``, ``fma(-q, g, +0)``."""
    q = fma_f32(mul_f32(g, g), GELU_K2, GELU_K1)
    return fma_f32(-q, g, np.float32(0.0))


def gelu_mul(gate_up, out_dtype: str = "bfloat16") -> np.ndarray:
    """`gelu_mul_kernel`: ``div_rn(g, 1 + softexp(-z)) * u``, bf16 bits [M, I]."""
    g, u = _halves(gate_up)
    gelu = div_rn(g, add_f32(np.float32(1.0), softexp(gelu_neg_z(g))))
    return cast(mul_f32(gelu, u), out_dtype)
