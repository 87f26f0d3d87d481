"""Reference model (numpy, integer-exact) of one sm_90 bf16 k16 MMA step with fp32 accumulator.

`d = mma_k16(a[16], b[16], c)` as measured on the H200 (Triton 3.6 `tl.dot` chains, wgmma):
1. the 16 products are exact: significands ma*mb (8x8 bits), *nominal* exponent ea+eb (the
   exponent fields' sum: a product whose significand reaches [2,4) is not renormalized);
2. Emax = the largest nominal exponent among the nonzero products and the accumulator c, but
   at least EMAX_FLOOR = -133 (a step of tiny terms only, e.g. a zero accumulator and products
   below 2^-126, aligns to -133: measured on the H200 2026-12-03, docs/mma_emulator.md);
3. every term (c included) is put on the fixed-point grid of step 2^(Emax-25), truncated
   toward zero (sign-magnitude) when it has lower bits;
4. the 17 grid values are added exactly;
5. the sum is converted to fp32 rounding toward zero (RZ), subnormal results kept.
Evidence: 0 mismatches on all 81,920 outputs of 2026-12-01-h200-mma-bits.npz (measurement);
the published fits (MMA-Sim arXiv 2511.10909; arXiv 2512.07004) describe the same family.

Operations the capture did not exercise follow the `MmaModel` switches (defaults = the
emulator's definition; benchmarks/mma_validate.py measures every switch on the H200):
bf16 subnormal inputs (exponent field 0) take exponent -126 without the hidden bit; NaN in,
inf*0 or inf-inf give the canonical NaN 0x7FFFFFFF; otherwise an inf term gives that inf;
a zero sum is +0 unless every term is a zero of sign - (IEEE addition of zeros).

Bits in, bits out: bf16 as uint16, fp32 as uint32, so signed zeros and NaN payloads are exact.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

STEP = 16  # k per MMA step
GRID = 25  # fraction bits kept below Emax (step 3)
CANONICAL_NAN = 0x7FFFFFFF
EMAX_FLOOR = -133  # the grid is never finer than 2^(EMAX_FLOOR - GRID) (step 2)
_NONE = -100_000  # exponent of a zero term: never the maximum, always shifted out


@dataclass(frozen=True)
class MmaModel:
    """Switches for behaviours the captured data did not decide (False = the default model).

    subnormal_in_ftz: bf16 subnormal inputs read as zero; acc_in_ftz: an fp32 subnormal
    accumulator reads as zero; subnormal_out_ftz: subnormal results flush to zero (sign kept);
    overflow_to_max: an overflowing sum gives +-FLT_MAX (IEEE RZ) instead of +-inf;
    signed_zeros: IEEE-like zero signs (a zero sum of terms that are all -0 is -0; a negative
    result truncated to zero is -0) instead of +0 for every zero result (the default, as
    MMA-Sim's Hopper model); subnormal_in_normalized / acc_in_normalized: a
    subnormal bf16 input / fp32 accumulator takes its true exponent (leading bit) as its
    nominal one, instead of -126.
    """

    subnormal_in_ftz: bool = False
    acc_in_ftz: bool = False
    subnormal_out_ftz: bool = False
    overflow_to_max: bool = False
    signed_zeros: bool = False
    subnormal_in_normalized: bool = False
    acc_in_normalized: bool = False

    def flags(self) -> int:
        """The bit mask the native emulator takes (mma_emu.c MMA_* flags: field order)."""
        bits = [getattr(self, f.name) for f in fields(self)]
        return sum(1 << i for i, on in enumerate(bits) if on)


DEFAULT = MmaModel()


def _fields(bits: np.ndarray, mant_bits: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(sign, exponent field, mantissa field) of IEEE bits with an 8-bit exponent."""
    b = bits.astype(np.int64)
    return (b >> (mant_bits + 8)) & 1, (b >> mant_bits) & 0xFF, b & ((1 << mant_bits) - 1)


def _finite(
    field: np.ndarray, mant: np.ndarray, mant_bits: int, ftz: bool, normalize: bool
) -> tuple[np.ndarray, np.ndarray]:
    """(significand, exponent of its last bit): subnormals read as 2^-126 * 0.mant (or 0), or
    normalized (significand shifted up to the hidden bit, exponent lowered to match)."""
    hidden = np.where(field == 0, 0, 1 << mant_bits)
    sig = np.where((field == 0) & ftz, 0, mant | hidden)
    sig = np.where(field == 0xFF, 0, sig)
    lsb = np.maximum(field, 1) - 127 - mant_bits
    if normalize:
        lead = np.floor(np.log2(np.maximum(sig, 1))).astype(np.int64)  # exact: sig < 2^24
        up = np.where((field == 0) & (sig != 0), mant_bits - lead, 0)
        sig, lsb = sig << up, lsb - up
    return sig, lsb


def _special_bits(x: np.ndarray, w: np.ndarray, acc: np.ndarray) -> np.ndarray:
    """Result bits of the steps some of whose inputs are inf/NaN; -1 where none is.
    x [M,16], w [N,16] uint16, acc [M,N] uint32."""
    xs, xf, xm = _fields(x, 7)
    ws, wf, wm = _fields(w, 7)
    cs, cf, cm = _fields(acc, 23)
    x_inf, w_inf = (xf == 0xFF) & (xm == 0), (wf == 0xFF) & (wm == 0)
    x_zero, w_zero = (xf == 0) & (xm == 0), (wf == 0) & (wm == 0)
    nan = ((xf == 0xFF) & (xm != 0))[:, None, :] | ((wf == 0xFF) & (wm != 0))[None, :, :]
    nan |= x_inf[:, None, :] & w_zero[None, :, :] | x_zero[:, None, :] & w_inf[None, :, :]
    inf = x_inf[:, None, :] | w_inf[None, :, :]
    neg = (xs[:, None, :] ^ ws[None, :, :]) == 1
    pos_inf = (inf & ~neg).any(2) | (cf == 0xFF) & (cm == 0) & (cs == 0)
    neg_inf = (inf & neg).any(2) | (cf == 0xFF) & (cm == 0) & (cs == 1)
    nan = nan.any(2) | (cf == 0xFF) & (cm != 0) | pos_inf & neg_inf
    out = np.where(pos_inf, 0x7F800000, np.where(neg_inf, 0xFF800000, -1))
    return np.where(nan, CANONICAL_NAN, out).astype(np.int64)


def _to_fp32(neg: np.ndarray, mag: np.ndarray, lsb_exp: np.ndarray, model: MmaModel) -> np.ndarray:
    """fp32 bits of (-1)^neg * mag * 2^lsb_exp rounded toward zero (mag int64 >= 0)."""
    msb = np.where(mag > 0, np.floor(np.log2(np.maximum(mag, 1))).astype(np.int64), 0)
    msb -= (np.left_shift(1, msb) > mag).astype(np.int64)  # guard log2 rounding up
    msb += (np.left_shift(1, msb + 1) <= mag).astype(np.int64)
    e = lsb_exp + msb
    sh = msb - 23
    sig = np.where(sh >= 0, mag >> np.clip(sh, 0, 62), mag << np.clip(-sh, 0, 62))
    normal = ((e + 127) << 23) | (sig & 0x7FFFFF)
    sub_sh = -149 - lsb_exp  # right shift onto the subnormal grid 2^-149
    sub = np.where(sub_sh >= 0, mag >> np.clip(sub_sh, 0, 63), mag << np.clip(-sub_sh, 0, 62))
    sub = np.where(sub_sh > 62, 0, sub)
    if model.subnormal_out_ftz:
        sub = np.zeros_like(sub)
    big = 0x7F7FFFFF if model.overflow_to_max else 0x7F800000
    body = np.where(e > 127, big, np.where(e < -126, sub, normal))
    body = np.where(mag == 0, 0, body)
    signed = (body != 0) | model.signed_zeros
    return body | ((neg.astype(np.int64) & signed) << 31)


def mma_k16(x: np.ndarray, w: np.ndarray, acc: np.ndarray, model: MmaModel = DEFAULT) -> np.ndarray:
    """One MMA step: acc[m,n] + sum_i x[m,i]*w[n,i], bits in and out.

    x [M,16] and w [N,16] bf16 bits (uint16), acc [M,N] fp32 bits (uint32) -> uint32 [M,N].
    """
    xs, xf, xm = _fields(x, 7)
    ws, wf, wm = _fields(w, 7)
    cs, cf, cm = _fields(acc, 23)
    ftz, norm = model.subnormal_in_ftz, model.subnormal_in_normalized
    xsig, xe = _finite(xf, xm, 7, ftz, norm)
    wsig, we = _finite(wf, wm, 7, ftz, norm)
    csig, ce = _finite(cf, cm, 23, model.acc_in_ftz, model.acc_in_normalized)
    psig = xsig[:, None, :] * wsig[None, :, :]
    pexp = xe[:, None, :] + we[None, :, :]
    sig = np.concatenate([csig[:, :, None], psig], axis=2)
    lsb = np.concatenate([ce[:, :, None], pexp], axis=2)  # exponent of each sig's last bit
    nominal = lsb + np.array([23] + [14] * STEP)  # c: its exponent; products: ea + eb
    neg = np.concatenate([cs[:, :, None], xs[:, None, :] ^ ws[None, :, :]], axis=2)
    emax = np.where(sig != 0, nominal, _NONE).max(axis=2)
    emax = np.where(emax == _NONE, _NONE, np.maximum(emax, EMAX_FLOOR))
    shift = lsb - (emax[:, :, None] - GRID)  # onto the grid of step 2^(Emax - 25)
    grid = np.where(shift >= 0, sig << np.clip(shift, 0, 40), sig >> np.clip(-shift, 0, 63))
    grid = np.where(shift < -62, 0, grid)
    total = np.where(neg == 1, -grid, grid).sum(axis=2)
    all_neg_zero = ((sig == 0) & (neg == 1)).all(axis=2) & model.signed_zeros
    out_neg = np.where(total == 0, all_neg_zero, total < 0)
    out = _to_fp32(out_neg, np.abs(total), np.maximum(emax, -1000) - GRID, model)
    special = _special_bits(x, w, acc)
    return np.where(special >= 0, special, out).astype(np.uint32)


def mma_chain(x: np.ndarray, w: np.ndarray, acc: np.ndarray | None = None,
              model: MmaModel = DEFAULT) -> np.ndarray:  # fmt: skip
    """acc = mma_k16(x[:, k0:k0+16], w[:, k0:k0+16], acc) for k0 = 0, 16, ... (bits).

    x [M,K], w [N,K] bf16 bits (uint16), K a multiple of 16; acc [M,N] fp32 bits or None
    (+0) -> uint32 [M,N].
    """
    x, w = _check(x, w)
    m, k = x.shape
    out = np.zeros((m, w.shape[0]), np.uint32) if acc is None else np.asarray(acc, np.uint32)
    for k0 in range(0, k, STEP):
        out = mma_k16(x[:, k0 : k0 + STEP], w[:, k0 : k0 + STEP], out, model)
    return out


def _check(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x, w = np.asarray(x), np.asarray(w)
    if x.ndim != 2 or w.ndim != 2 or x.shape[1] != w.shape[1]:
        raise ValueError(f"mma_chain: x [M,K] and w [N,K] expected, got {x.shape}, {w.shape}")
    if x.shape[1] % STEP:
        raise ValueError(f"mma_chain: K={x.shape[1]} is not a multiple of {STEP}")
    return x.astype(np.uint16), w.astype(np.uint16)
