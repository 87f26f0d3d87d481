"""Input classes for validating the MMA emulator against the GPU (numpy, seeded, bits only).

`make_case(kind, m, n, k, rng)` -> (x [M,K] uint16, w [N,K] uint16, acc [M,N] uint32): bf16
operands and the fp32 accumulator the chain starts from. The kinds cover what the H200
capture did not: signed zeros, subnormal inputs and results, inf/NaN, overflow, extreme
exponent spreads and exact cancellation (used by benchmarks/mma_validate.py and the tests).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Case = tuple[np.ndarray, np.ndarray, np.ndarray]


def bf16_bits(f: np.ndarray) -> np.ndarray:
    """bf16 bits of float32 values, rounded to nearest even (NaN kept quiet)."""
    u = np.ascontiguousarray(f, np.float32).view(np.uint32).astype(np.uint64)
    r = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(f)
    return np.where(nan, (u >> 16) | 0x40, r).astype(np.uint16)


def _normal(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    return rng.standard_normal(shape, dtype=np.float32)


def _spread(rng: np.random.Generator, shape: tuple[int, int], span: int) -> np.ndarray:
    e = rng.integers(-span, span + 1, size=shape).astype(np.float32)
    return _normal(rng, shape) * np.exp2(e)


def _random_fields(
    rng: np.random.Generator, shape: tuple[int, int], lo: int, hi: int
) -> np.ndarray:
    """bf16 bits with exponent fields uniform in [lo, hi], random sign and mantissa."""
    field = rng.integers(lo, hi + 1, size=shape, dtype=np.uint32)
    low = rng.integers(0, 1 << 8, size=shape, dtype=np.uint32)  # sign + 7 mantissa bits
    return (((low >> 7) << 15) | (field << 7) | (low & 0x7F)).astype(np.uint16)


def _signed_zeros(rng: np.random.Generator, bits: np.ndarray, share: float) -> np.ndarray:
    zero = rng.random(bits.shape) < share
    sign = rng.integers(0, 2, size=bits.shape, dtype=np.uint16) << 15
    return np.where(zero, sign, bits).astype(np.uint16)


def _plain(
    gen: Callable[[np.random.Generator, tuple[int, int]], np.ndarray],
) -> Callable[[int, int, int, np.random.Generator], Case]:
    def case(m: int, n: int, k: int, rng: np.random.Generator) -> Case:
        x, w = bf16_bits(gen(rng, (m, k))), bf16_bits(gen(rng, (n, k)))
        return x, w, np.zeros((m, n), np.uint32)

    return case


def _cancel(m: int, n: int, k: int, rng: np.random.Generator) -> Case:
    """Pairs of large terms that cancel exactly or nearly, small ones left (rows of w: the
    pair's two entries equal, so x[2i+1] = -x[2i] cancels exactly)."""
    x = _spread(rng, (m, k), 8)
    x[:, 1::2] = -x[:, ::2] * np.where(rng.random((m, k // 2)) < 0.5, 1.0, 1 + 2.0**-7)
    w = _spread(rng, (n, k), 8)
    w[:, 1::2] = w[:, ::2]
    return bf16_bits(x), bf16_bits(w), np.zeros((m, n), np.uint32)


def _zeros(m: int, n: int, k: int, rng: np.random.Generator) -> Case:
    """Half the entries +-0; rows all zeros of random signs, all -0 or all +0; acc +-0."""
    x = _signed_zeros(rng, bf16_bits(_normal(rng, (m, k))), 0.5)
    w = _signed_zeros(rng, bf16_bits(_normal(rng, (n, k))), 0.5)
    for a, size in ((x, m), (w, n)):
        a[rng.random(size) < 0.2] &= 0x8000
        a[rng.random(size) < 0.2] = 0x8000
        a[rng.random(size) < 0.2] = 0x0000
    acc = rng.integers(0, 2, size=(m, n), dtype=np.uint32) << 31
    return x, w, acc


def _subnormal_in(m: int, n: int, k: int, rng: np.random.Generator) -> Case:
    """bf16 subnormals and the smallest normals times large values: normal products."""
    x = _signed_zeros(rng, _random_fields(rng, (m, k), 0, 2), 0.05)
    w = _random_fields(rng, (n, k), 200, 254)
    return x, w, np.zeros((m, n), np.uint32)


def _subnormal_out(m: int, n: int, k: int, rng: np.random.Generator) -> Case:
    """bf16 subnormals and tiny normals: products below 2^-126, results fp32 subnormal."""
    x = _random_fields(rng, (m, k), 0, 70)
    w = _random_fields(rng, (n, k), 0, 70)
    x = _signed_zeros(rng, x, 0.05)
    acc = _random_fields(rng, (m, n), 0, 2).astype(np.uint32) << 16
    return x, w, acc | rng.integers(0, 1 << 16, size=(m, n), dtype=np.uint32)


def _full(m: int, n: int, k: int, rng: np.random.Generator) -> Case:
    """Exponent fields uniform over every finite value: overflow, underflow, huge spreads."""
    return (
        _random_fields(rng, (m, k), 0, 254),
        _random_fields(rng, (n, k), 0, 254),
        np.zeros((m, n), np.uint32),
    )


def _maxmag(m: int, n: int, k: int, rng: np.random.Generator) -> Case:
    """Near the largest bf16 values times values near 1: sums overflow, or cancel back."""
    x = _random_fields(rng, (m, k), 250, 254)
    w = _random_fields(rng, (n, k), 120, 128)
    return x, w, np.zeros((m, n), np.uint32)


def _special(m: int, n: int, k: int, rng: np.random.Generator) -> Case:
    """Normal values with some +-inf, NaN and zeros (inf * 0, inf - inf, NaN in)."""
    x, w, acc = _plain(_normal)(m, n, k, rng)
    pick = (0x7F80, 0xFF80, 0x7FC0, 0xFFC1, 0x0000, 0x8000)
    for a in (x, w):
        hit = rng.random(a.shape) < 0.3 / k
        a[hit] = rng.choice(np.array(pick, np.uint16), size=int(hit.sum()))
    acc[rng.random(acc.shape) < 0.01] = 0xFF800000
    return x, w, acc


def _accin(m: int, n: int, k: int, rng: np.random.Generator) -> Case:
    """Normal operands, accumulator of any fp32 bits (huge, tiny, subnormal, +-0)."""
    x, w, _ = _plain(_normal)(m, n, k, rng)
    acc = rng.integers(0, 1 << 32, size=(m, n), dtype=np.uint64).astype(np.uint32)
    field = (acc >> 23) & 0xFF
    acc = np.where(field == 0xFF, acc & 0x807FFFFF, acc)  # no inf/NaN here
    acc[rng.random(acc.shape) < 0.05] &= 0x80000000
    return x, w, acc


KINDS: dict[str, Callable[[int, int, int, np.random.Generator], Case]] = {
    "normal": _plain(_normal),
    "uniform": _plain(lambda rng, s: rng.random(s, dtype=np.float32)),
    "wide24": _plain(lambda rng, s: _spread(rng, s, 24)),
    "wide60": _plain(lambda rng, s: _spread(rng, s, 60)),
    "cancel": _cancel,
    "zeros": _zeros,
    "subnormal_in": _subnormal_in,
    "subnormal_out": _subnormal_out,
    "full": _full,
    "maxmag": _maxmag,
    "special": _special,
    "accin": _accin,
}


def make_case(kind: str, m: int, n: int, k: int, rng: np.random.Generator) -> Case:
    """Operands of one class; K a multiple of 16 (the MMA step)."""
    if kind not in KINDS:
        raise ValueError(f"unknown MMA case kind {kind!r}; known: {', '.join(KINDS)}")
    if k % 16 or k <= 0:
        raise ValueError(f"K={k} must be a positive multiple of 16")
    return KINDS[kind](m, n, k, rng)
