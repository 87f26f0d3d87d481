"""Fit of the H200 bf16 k16 MMA step (fp32 accumulate) to the captured bits: mismatches of
each model variant on every captured output of ../shared/measurements/2026-12-01-h200-mma-bits
.npz (4 distributions x K 16..4096). Variants: grid bits below the reference exponent (23-27),
terms truncated toward zero or floored, the sum rounded toward zero (RZ) or to nearest (RN),
the reference exponent of a product nominal (ea + eb) or true (its leading bit). Only the
definition of docs/mma_emulator.md (25, trunc, RZ, nominal) gives 0.
Usage: python benchmarks/mma_fit.py [NPZ] (CPU, a few minutes)."""

from __future__ import annotations

import sys

import numpy as np

NONE = -(10**6)


def bf16(a: np.ndarray) -> np.ndarray:
    return ((a.astype(np.int32) & 0xFFFF) << 16).astype(np.uint32).view(np.float32).astype(float)


def ilog2(v: np.ndarray) -> np.ndarray:
    return np.where(v != 0, np.frexp(v)[1] - 1, NONE)


def to_f32(s: np.ndarray, rnd: str) -> np.ndarray:
    s32 = s.astype(np.float32).astype(np.float64)
    if rnd == "RN":
        return s32
    toward = np.nextafter(s32.astype(np.float32), np.float32(0)).astype(np.float64)
    return np.where(np.abs(s32) > np.abs(s), toward, s32)


def chain(x, w, grid: int, trunc: bool, rnd: str, nominal: bool) -> np.ndarray:
    acc = np.zeros((x.shape[0], w.shape[0]))
    ex, ew = ilog2(np.abs(x)), ilog2(np.abs(w))
    for k0 in range(0, x.shape[1], 16):
        p = x[:, None, k0 : k0 + 16] * w[None, :, k0 : k0 + 16]
        pe = ex[:, None, k0 : k0 + 16] + ew[None, :, k0 : k0 + 16] if nominal else ilog2(abs(p))
        emax = np.maximum(np.where(p != 0, pe, NONE).max(axis=2), ilog2(np.abs(acc)))
        ulp = np.exp2(np.where(emax < NONE // 2, 0, emax) - grid)[:, :, None]
        q = np.concatenate([acc[:, :, None], p], axis=2) / ulp
        acc = to_f32(((np.trunc(q) if trunc else np.floor(q)) * ulp).sum(axis=2), rnd)
    return acc.astype(np.float32)


def main() -> None:
    path = (
        sys.argv[1] if len(sys.argv) > 1 else "../shared/measurements/2026-12-01-h200-mma-bits.npz"
    )
    d = np.load(path)
    cases = [(kind, k) for kind in ("normal", "uniform", "cancel", "wide")
             for k in (16, 32, 64, 256, 4096)]  # fmt: skip
    for grid in (23, 24, 25, 26, 27):
        for trunc in (True, False):
            for rnd in ("RZ", "RN"):
                for nominal in (True, False):
                    bad = total = 0
                    for kind, k in cases:
                        x, w = bf16(d[f"{kind}_K{k}_x"]), bf16(d[f"{kind}_K{k}_w"])
                        y = d[f"{kind}_K{k}_bk16_bm64"].view(np.uint32)
                        got = chain(x, w, grid, trunc, rnd, nominal).view(np.uint32)
                        bad, total = bad + int((got != y).sum()), total + y.size
                    mode = "trunc" if trunc else "floor"
                    ref = "nominal" if nominal else "true"
                    print(f"grid {grid} {mode:5} {rnd} {ref:7}: {bad} of {total}", flush=True)


if __name__ == "__main__":
    main()
