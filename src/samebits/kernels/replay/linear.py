"""The GPU plan's split-plan linear on the CPU, bit for bit (kernels/triton/_linear_kernels.py).

Definition (read from the kernels; every launch of kernels/triton/launches.py computes it):
- x [M, K] and w [N, K] are bf16 (linear.py requires x.dtype == w.dtype; the GPU plan's
  weights are bf16), and are dotted as they are: no cast before the dot;
- range s of the plan is ``[s*range_k, (s+1)*range_k)`` read with zeros past min(K, hi): the
  kernel runs range_k / 16 k16 MMA steps per range (BLOCK_K-wide ``tl.dot`` = BLOCK_K / 16
  k16 steps in k order, measured), each range a fresh chain: ``acc = tl.zeros`` then
  ``acc = tl.dot(a, b, acc)``, i.e. the first step from a +0 accumulator (mma_emu's chain);
- the ranges' fp32 chains are added in fp32 in order ``((c_0 + c_1) + c_2) + ...`` (IEEE
  round to nearest: ``add.f32``; a NaN result is the GPU's canonical 0x7FFFFFFF, where x86
  would keep a payload or give 0xFFC00000), then ``+ bias`` (fp32), then the cast to the
  output dtype (fp32 -> bf16 round to nearest even; NaN -> 0x7FFF). The NaN bits are chosen
  from the PTX canonical NaN, not yet measured on the H200 (the check's NaN cases do);
- the fused ``sum_add_rms_norm_kernel`` writes the same linear output and then
  ``residual + float32(output)`` (fp32 add); its RMSNorm is a row kernel, not replayed here.
The MMA step is the emulator's (kernels/cpu/mma_emu.c, validated on the H200).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from samebits.kernels.cpu.mma_emu import DecodedWeight
from samebits.kernels.cpu.mma_model import DEFAULT, STEP, MmaModel
from samebits.kernels.splitplan import SplitPlan

OUT_DTYPES = ("bfloat16", "float32")
BF16_NAN = 0x7FFF
FP32_NAN = np.uint32(0x7FFFFFFF)


def add_fp32(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``add.f32`` as the GPU computes it: IEEE round to nearest, NaN results canonical."""
    with np.errstate(invalid="ignore", over="ignore"):
        total = np.add(a, b, dtype=np.float32)
    return np.where(np.isnan(total), FP32_NAN, total.view(np.uint32)).view(np.float32)


def fp32_to_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """fp32 bits -> bf16 bits, round to nearest even (``cvt.rn.bf16.f32``); NaN -> 0x7FFF."""
    u = np.asarray(bits, np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (u & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, np.uint16(BF16_NAN), rounded)


def _cast(total: np.ndarray, out_dtype: str) -> np.ndarray:
    bits = total.astype(np.float32, copy=False).view(np.uint32)
    return bits.copy() if out_dtype == "float32" else fp32_to_bf16_bits(bits)


def _check_out_dtype(out_dtype: str) -> None:
    if out_dtype not in OUT_DTYPES:
        raise ValueError(f"replay: out_dtype must be one of {OUT_DTYPES}, got {out_dtype!r}")


def _bias32(bias: Any, n: int) -> np.ndarray | None:
    if bias is None:
        return None
    b = np.asarray(bias)
    if b.dtype == np.uint32:
        b = b.view(np.float32)
    if b.dtype != np.float32 or b.shape != (n,):
        raise ValueError(f"replay: bias must be float32 [{n}] (the GPU adds it in fp32)")
    return b


def _fp32_sum(partials: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    """((p_0 + p_1) + ...) + bias in fp32, elementwise (numpy float32: IEEE round to nearest)."""
    p = np.asarray(partials)
    p = p.view(np.float32) if p.dtype == np.uint32 else p
    if p.dtype != np.float32 or p.ndim != 3:
        raise ValueError("replay: partials must be float32 (or uint32 bits) [S, M, N]")
    total = p[0].copy()
    for s in range(1, p.shape[0]):
        total = add_fp32(total, p[s])
    return total if bias is None else add_fp32(total, bias[None, :])


def ordered_sum(partials: np.ndarray, bias: Any, out_dtype: str) -> np.ndarray:
    """``ordered_sum_kernel``: partials [S, M, N] summed in order, + bias, cast (output bits:
    uint16 for bfloat16, uint32 for float32)."""
    _check_out_dtype(out_dtype)
    return _cast(_fp32_sum(partials, _bias32(bias, np.shape(partials)[-1])), out_dtype)


def sum_add_residual(
    partials: np.ndarray, bias: Any, residual: np.ndarray, out_dtype: str = "bfloat16"
) -> tuple[np.ndarray, np.ndarray]:
    """``sum_add_rms_norm_kernel`` up to its RMSNorm: (linear output bits, new residual fp32)
    with ``residual + float32(output)`` (the kernel's ``r = res + total.to(out).to(fp32)``)."""
    out = ordered_sum(partials, bias, out_dtype)
    res = np.asarray(residual)
    if res.dtype != np.float32 or res.shape != out.shape:
        raise ValueError(f"replay: residual must be float32 {out.shape}")
    wide = out.astype(np.uint32) << 16 if out_dtype == "bfloat16" else out
    return out, add_fp32(res, wide.view(np.float32))


def _range_slice(a: np.ndarray, lo: int, hi: int, width: int) -> np.ndarray:
    """Columns [lo, hi) of bf16 bits a, zero-padded to `width` (the kernel's masked loads)."""
    out = np.zeros((a.shape[0], width), np.uint16)
    out[:, : hi - lo] = a[:, lo:hi]
    return out


def _bf16_bits(a: Any, name: str, cols: int) -> np.ndarray:
    a = np.asarray(a)
    if a.dtype not in (np.uint16, np.int16) or a.ndim != 2 or a.shape[1] != cols:
        raise ValueError(f"replay: {name} must be bf16 bits (uint16) [_, {cols}], got "
                         f"{a.dtype} {a.shape}")  # fmt: skip
    return a.view(np.uint16)


class ReplayLinear:
    """One weight of the GPU plan on the CPU: its plan's ranges pre-decoded for the emulator.

    Invariant: ``self(x)`` is the bits every launch of the GPU plan writes for ``x`` (the
    definition in the module docstring); row m depends on row m of x only.
    """

    def __init__(self, weight: Any, bias: Any, plan: SplitPlan, out_dtype: str = "bfloat16",
                 model: MmaModel = DEFAULT, threads: int | None = None):  # fmt: skip
        _check_out_dtype(out_dtype)
        w = _bf16_bits(weight, "weight", plan.k)
        if w.shape[0] != plan.n or plan.range_k % STEP:
            raise ValueError(f"replay: weight must be [{plan.n}, {plan.k}] with range_k % 16 == 0")
        self.plan, self.out_dtype, self.threads = plan, out_dtype, threads
        self.bias = _bias32(bias, plan.n)
        self.ranges = plan.ranges()
        self.weights = [
            DecodedWeight(_range_slice(w, lo, hi, plan.range_k), model, threads)
            for lo, hi in self.ranges
        ]  # fmt: skip

    def partials(self, x: Any) -> np.ndarray:
        """``linear_partials_kernel``: chain c_s of every range, fp32 bits [S, M, N]."""
        xb = _bf16_bits(x, "x", self.plan.k)
        return np.stack([
            d.chain(_range_slice(xb, lo, hi, self.plan.range_k), None, self.threads)
            for d, (lo, hi) in zip(self.weights, self.ranges, strict=True)
        ])  # fmt: skip

    def __call__(self, x: Any) -> np.ndarray:
        """y = x @ w.T (+ bias) as the GPU writes it: uint16 bits (bfloat16) or uint32 (float32)."""
        return ordered_sum(self.partials(x), self.bias, self.out_dtype)
