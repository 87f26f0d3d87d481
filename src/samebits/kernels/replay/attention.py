"""The GPU plan's paged attention on the CPU, bit for bit (`kernels/triton/_attention_kernel.py`,
whose exponentials are `ex2q` of `_softexp2.py` and whose launches contract no
multiply-add: `attention.FP_FUSION`).

Definition (read from `_attention_kernel.py`; every launch computes it per query row, so the
replay runs one row at a time): a row at position t with window W reduces keys lo..t,
lo = max(t - W + 1, 0), in spans of SPAN keys at absolute positions; inside a span, key tiles
of BLOCK_N at absolute positions, from a fresh state (m = -inf, l = +0, acc = +0):

- ``s = mul(mma(q, k_tile), qk_scale)`` (the chain over D in k16 steps from +0; qk_scale is
  the fp32 kernel argument ``scale * log2 e``), keys outside lo..t -> -inf;
- ``m' = max(m, max(s))``, ``alpha = exp2(m - m')``, ``p = bf16(exp2(s - m'))`` (+0 for a
  key outside lo..t);
- ``l' = fma(l, alpha, mma(p, ones)[0])``, ``acc' = mma(p, v_tile)`` from the accumulator
  ``mul(acc, alpha)`` (the kernel's ``tl.dot(p, v, acc * alpha)``);
- a tile with no key in lo..t keeps the state (``tl.where``), as does a span; span states
  fold in span order: ``m' = max(m, m_s)``, ``a = exp2(m - m')``, ``b = exp2(m_s - m')``,
  ``l' = fma(l, a, l_s * b)``, ``acc' = fma(acc, a, acc_s * b)`` (explicit ``tl.fma``);
- ``out = bf16(div_rn(acc, l))``.
Keys past t inside a tile are read as +0 here: their p is +0, and a zero term changes neither
the MMA's Emax nor its sum (mma_model.py; a tile with a key in lo..t has a p = 1 term), so
this equals the kernel's loads for finite caches.

exp2 is ``ex2q`` (`kernels/triton/_softexp2.py`), replayed by `samebits.kernels.replay.ex2q`
(its definition: the argument on a 2^-12 grid, a 4,096-entry table of the GPU's ex2).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from samebits.kernels.cpu import mma_emu
from samebits.kernels.cpu.mma_emu import chain_bits
from samebits.kernels.cpu.mma_model import DEFAULT
from samebits.kernels.replay.ex2q import TABLE as EX2_TABLE
from samebits.kernels.replay.ex2q import ex2q
from samebits.kernels.replay.linear import fp32_to_bf16_bits
from samebits.kernels.replay.softexp import add_f32, canon, div_rn, fma_f32, mul_f32

ONE = np.float32(1.0)
NEG_INF = np.float32(-np.inf)
BF16_ONE = np.uint16(0x3F80)


@dataclass(frozen=True)
class Launch:
    """The kernel's numerics constants: key tile, span, and the fp32 score scale."""

    block_n: int
    span: int
    qk_scale: float  # scale * log2(e) as the host computes it (float64), passed as fp32

    def __post_init__(self) -> None:
        if self.block_n % 16 or self.span % self.block_n:
            raise ValueError(f"block_n {self.block_n} must be a multiple of 16 dividing span")


def _mma(x_bits: np.ndarray, w_bits: np.ndarray, acc: np.ndarray | None = None) -> np.ndarray:
    """fp32 of the k16 chain of x [M, K] and w [N, K] (bf16 bits) from `acc` (fp32 [M, N];
    None: +0)."""
    acc_bits = None if acc is None else np.ascontiguousarray(acc, np.float32).view(np.uint32)
    return chain_bits(x_bits, w_bits, acc_bits).view(np.float32)


def _tile(q, k, v, key0, pos, lo, launch, state):
    """One active key tile's online-softmax update of one row (see module docstring)."""
    m, l_i, acc = state
    keys = key0 + np.arange(launch.block_n)
    inside = (keys <= pos) & (keys >= lo)
    k_t = np.zeros((launch.block_n, k.shape[1]), np.uint16)
    v_t = np.zeros((launch.block_n, v.shape[1]), np.uint16)
    have = keys[keys <= pos]
    k_t[: have.size], v_t[: have.size] = k[have], v[have]
    s = mul_f32(_mma(q[None, :], k_t)[0], np.float32(launch.qk_scale))
    s = np.where(inside, s, NEG_INF).astype(np.float32)
    m_new = np.maximum(m, s.max())
    alpha = ex2q(add_f32(m, -m_new))
    p = fp32_to_bf16_bits(ex2q(add_f32(s, -m_new)).view(np.uint32))[None, :]
    ones = np.full((16, launch.block_n), BF16_ONE, np.uint16)
    row_sum = _mma(p, ones)[0, 0]
    l_new = fma_f32(l_i, alpha, row_sum)
    acc_new = _mma(p, v_t.T.copy(), mul_f32(acc, alpha)[None, :])[0]
    return np.float32(m_new), np.float32(l_new), acc_new.astype(np.float32)


def _fresh(d: int):
    return NEG_INF, np.float32(0.0), np.zeros(d, np.float32)


def _merge(state, span_state):
    m, l_i, acc = state
    m_s, l_s, acc_s = span_state
    m_new = np.maximum(m, m_s)
    a = ex2q(add_f32(m, -m_new))
    b = ex2q(add_f32(m_s, -m_new))
    return (np.float32(m_new), np.float32(fma_f32(l_i, a, mul_f32(l_s, b))),
            fma_f32(acc, a, mul_f32(acc_s, b)).astype(np.float32))  # fmt: skip


def attend_row(q, k, v, pos: int, window: int, launch: Launch):
    """fp32 output [D] of one query row: q [D], k / v [>= pos + 1, D] bf16 bits of its KV
    head at absolute positions; `window` 0 = full attention."""
    lo = max(pos - window + 1, 0) if window else 0
    state = _fresh(q.shape[0])
    for span0 in range(0, pos + 1, launch.span):
        if span0 + launch.span <= lo:
            continue  # take is false: the state is kept
        span_state = _fresh(q.shape[0])
        for key0 in range(span0, min(span0 + launch.span, pos + 1), launch.block_n):
            if key0 + launch.block_n > lo:  # active tile
                span_state = _tile(q, k, v, key0, pos, lo, launch, span_state)
        state = _merge(state, span_state)
    _, l_i, acc = state
    return canon(div_rn(acc, l_i))


def paged_attention(
    q, k, v, positions, group: int, launch: Launch, window: int = 0,
    out_dtype: str = "bfloat16", threads: int | None = None,
) -> np.ndarray:  # fmt: skip
    """Output bits [T, H, D] of q [T, H, D] for one request: k, v [L, HKV, D] bf16 bits at
    absolute positions (the cache gathered through the block table), token i at
    positions[i]; head h reads KV head h // group. `out_dtype` "bfloat16" (uint16 bits, the
    kernel's q dtype) or "float32" (uint32 bits: the row before the output cast).
    Computed by the native replay (`kernels/cpu/replay_attn.c`, the same bits as
    `paged_attention_numpy`); without a C compiler by the numpy reference, with a warning."""
    if out_dtype not in ("bfloat16", "float32"):
        raise ValueError(f"replay: out_dtype must be bfloat16 or float32, got {out_dtype!r}")
    q, k, v = (np.asarray(a, np.uint16) for a in (q, k, v))
    if not mma_emu.available():
        warnings.warn(f"replay attention: native emulator unavailable "
                      f"({mma_emu.build_error()}); the numpy reference is used", stacklevel=2)  # fmt: skip
        return paged_attention_numpy(q, k, v, positions, group, launch, window, out_dtype)
    rows = _native(q, k, v, np.asarray(positions, np.int64), group, launch, window, threads)
    return fp32_to_bf16_bits(rows) if out_dtype == "bfloat16" else rows


def _native(q, k, v, positions, group, launch, window, threads) -> np.ndarray:
    """fp32 bits [T, H, D] from sb_replay_attention."""
    t, h, d = q.shape
    hkv = k.shape[1]
    if h != hkv * group or k.shape != v.shape or k.shape[2] != d:
        raise ValueError(f"replay attention: q {q.shape}, k {k.shape}, v {v.shape}, group {group}")
    q = np.ascontiguousarray(q)
    kt = np.ascontiguousarray(k.transpose(1, 0, 2))  # [HKV, L, D]
    vt = np.ascontiguousarray(v.transpose(1, 2, 0))  # [HKV, D, L]
    pos = np.ascontiguousarray(positions)
    out = np.empty((t, h, d), np.uint32)
    scale_bits = int(np.float32(launch.qk_scale).view(np.uint32))
    rc = mma_emu.library().sb_replay_attention(
        q.ctypes.data, t, h, d, kt.ctypes.data, vt.ctypes.data, hkv, k.shape[0],
        pos.ctypes.data, launch.block_n, launch.span, scale_bits, EX2_TABLE.ctypes.data, window,
        DEFAULT.flags(), out.ctypes.data, threads or mma_emu.cores(),
    )  # fmt: skip
    if rc == -2:
        raise ValueError("replay attention: a position outside the keys, or a shape the "
                         "kernel does not take (D, block_n multiples of 16; group <= 64)")  # fmt: skip
    if rc != 0:
        raise MemoryError("replay attention: out of memory")
    return out


def paged_attention_numpy(
    q, k, v, positions, group: int, launch: Launch, window: int = 0,
    out_dtype: str = "bfloat16",
) -> np.ndarray:  # fmt: skip
    """`paged_attention` by the numpy reference (`attend_row`, one row and head at a time)."""
    q, k, v = (np.asarray(a, np.uint16) for a in (q, k, v))
    out = np.empty(q.shape, np.uint16 if out_dtype == "bfloat16" else np.uint32)
    for i, pos in enumerate(np.asarray(positions).tolist()):
        for h in range(q.shape[1]):
            hk = h // group
            row = attend_row(q[i, h], k[:, hk], v[:, hk], int(pos), window, launch)
            row_bits = row.view(np.uint32)
            out[i, h] = fp32_to_bf16_bits(row_bits) if out_dtype == "bfloat16" else row_bits
    return out
