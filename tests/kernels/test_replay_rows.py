"""CPU replay of the GPU plan's row kernels (`samebits.kernels.replay.rows`, `.softexp`,
`.moe`): bit for bit against slow models written here independently (scalar loops, the C
library's ``fmaf`` for every fused multiply-add), plus the soft exp's accuracy and edge
cases, and the RMSNorm layout rule against Triton's own sm_90 compilation (AOT, no GPU)."""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest

from samebits.kernels.replay import moe as rmoe
from samebits.kernels.replay import rows
from samebits.kernels.replay.softexp import fma_f32, softexp

_LIBM = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
_LIBM.fmaf.restype = ctypes.c_float
_LIBM.fmaf.argtypes = [ctypes.c_float] * 3
F = np.float32
EDGE = np.array([0.0, -0.0, 1e-45, -1e-45, 1.1754942e-38, -3e-39, np.inf, -np.inf, np.nan,
                 3.4028235e38, -3.4028235e38, 1.0, -1.0, 2.0**-75, 2.0**64], F)  # fmt: skip


def bits(a) -> np.ndarray:
    return np.ascontiguousarray(a).view(
        np.uint32 if np.asarray(a).dtype.itemsize == 4 else np.uint16
    )


def cfma(a, b, c) -> F:
    """fp32 fma by the C library (correctly rounded); NaN canonical as on the GPU."""
    r = F(_LIBM.fmaf(float(a), float(b), float(c)))
    return F(np.uint32(0x7FFFFFFF).view(F)) if np.isnan(r) else r


def _operands(n: int, seed: int):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(n) * 2.0 ** rng.integers(-70, 70, n)).astype(F)
    b = (rng.standard_normal(n) * 2.0 ** rng.integers(-70, 70, n)).astype(F)
    with np.errstate(over="ignore"):
        c = (-(a.astype(np.float64) * b) * (1 + rng.standard_normal(n) * 2.0**-20)).astype(F)
    n3 = len(c[::3])
    c[::3] = rng.standard_normal(n3) * 2.0 ** rng.integers(-140, 100, n3)
    grid = np.array(np.meshgrid(EDGE, EDGE, EDGE)).reshape(3, -1).astype(F)
    return np.concatenate([a, grid[0]]), np.concatenate([b, grid[1]]), np.concatenate([c, grid[2]])


def test_fma_matches_libm_fmaf_including_edges():
    a, b, c = _operands(30000, 0)
    ref = np.array([cfma(x, y, z) for x, y, z in zip(a, b, c, strict=True)], F)
    assert np.array_equal(bits(fma_f32(a, b, c)), bits(ref))
    # not vacuous: an unfused a*b + c differs on the cancelling operands
    with np.errstate(all="ignore"):
        assert not np.array_equal(bits((a * b + c).astype(F)), bits(ref))


def test_fma_exact_rational_cases():
    """Double rounding traps: a*b + c exactly halfway between fp32 values after one rounding."""
    from fractions import Fraction

    rng = np.random.default_rng(5)
    for _ in range(3000):
        a, b = F(1 + rng.integers(1, 2**23) * 2.0**-23), F(1 + rng.integers(1, 2**23) * 2.0**-23)
        c = F(rng.choice([-1.0, 1.0]) * 2.0 ** rng.integers(-30, 2))
        exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
        got = fma_f32(a, b, c)
        lo = np.nextafter(got, F(-np.inf), dtype=F)
        hi = np.nextafter(got, F(np.inf), dtype=F)
        err = abs(Fraction(float(got)) - exact)
        assert err <= abs(Fraction(float(lo)) - exact) and err <= abs(Fraction(float(hi)) - exact)


def test_softexp_accuracy_within_2_ulp():
    x = np.linspace(-104, 89, 1_000_001, dtype=F)
    y = softexp(x).astype(np.float64)
    ref = np.exp(x.astype(np.float64))
    normal = (ref > 2.0**-126) & (ref < 3.4e38)
    ulp = np.spacing(ref[normal].astype(F)).astype(np.float64)
    assert (np.abs(y[normal] - ref[normal]) / ulp).max() <= 2.0
    sub = ref <= 2.0**-126  # subnormal results: within one subnormal ulp (2^-149)
    assert (np.abs(y[sub] - ref[sub]) <= 2.0**-149).all()


def test_softexp_edges():
    x = np.array([0.0, -0.0, -np.inf, np.inf, -104.5, -200.0, 88.8, 100.0, -87.0, 1e-45], F)
    y = softexp(x)
    assert bits(y[:2]).tolist() == [bits(F(1.0))[()]] * 2
    assert bits(y[[2, 4, 5]]).tolist() == [0, 0, 0]  # +0, never -0
    assert np.isposinf(y[[3, 6, 7]]).all()
    assert 0 < y[8] < 2.0**-125 and y[9] == F(1.0)
    nan = np.array([0x7FC00001, 0xFFC12345], np.uint32).view(F)
    assert np.array_equal(bits(softexp(nan)), bits(nan))  # a select: the NaN's own bits


# --- RMSNorm ---------------------------------------------------------------------------


def _slow_sum_squares(row: np.ndarray, lane_of: int) -> F:
    """The reduction of rows.py's docstring, written as thread loops (C fmaf)."""
    width = len(row)
    block = 1 << (width - 1).bit_length()
    warps = min(8, max(1, block // 256))
    spt = min(8, max(1, block // (32 * warps)))
    lanes = min(32, block // spt)
    per = block // (lanes * warps)
    val = lambda i: F(row[i]) if i < width else F(0.0)  # noqa: E731
    if per == 1:
        v = [F(val(i) * val(i)) for i in range(lanes)]
        if lanes > 1:
            h = lanes // 2
            v = [cfma(val(i), val(i), v[i ^ h]) for i in range(lanes)]
            o = h // 2
            while o:
                v = [F(v[i] + v[i ^ o]) for i in range(lanes)]
                o //= 2
        return v[lane_of]
    part = []
    for t in range(lanes * warps):
        idx = [j * spt * lanes * warps + t * spt + k for j in range(per // spt) for k in range(spt)]
        acc = cfma(val(idx[0]), val(idx[0]), F(val(idx[1]) * val(idx[1])))
        for i in idx[2:]:
            acc = cfma(val(i), val(i), acc)
        part.append(acc)
    for group in (lanes, warps):
        heads = part[::lanes] if group == warps else None
        if group == lanes:
            sums = []
            for w in range(warps):
                v = part[w * lanes : (w + 1) * lanes]
                o = lanes // 2
                while o:
                    v = [F(v[i] + v[i ^ o]) for i in range(lanes)]
                    o //= 2
                sums.append(v[0])
            part = sums
        else:
            del heads
            v, o = part, warps // 2
            while o:
                v = [F(v[i] + v[i ^ o]) for i in range(warps)]
                o //= 2
            part = v
    return part[0]


def _slow_rms(r: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    out = np.empty_like(r)
    with np.errstate(all="ignore"):
        for m in range(r.shape[0]):
            for i in range(r.shape[1]):
                s = _slow_sum_squares(r[m], i)
                inv = F(F(1.0) / F(np.sqrt(F(F(s / F(r.shape[1])) + F(eps)))))
                out[m, i] = F(F(r[m, i] * inv) * w[i])
    return out


def _bf16(a: np.ndarray) -> np.ndarray:
    return rows.cast(np.asarray(a, F), "bfloat16")


@pytest.mark.parametrize("width", [1, 16, 24, 64, 128, 256, 576, 2048, 4096])
def test_rms_norm_matches_slow_model(width):
    rng = np.random.default_rng(width)
    x = (rng.standard_normal((2, width)) * 2.0 ** rng.integers(-8, 8, (2, width))).astype(F)
    w = rng.standard_normal(width).astype(F)
    want = _bf16(_slow_rms(rows.widen(_bf16(x)), w, 1e-5)) if width <= 576 else None
    got = rows.rms_norm(_bf16(x), w, 1e-5)
    if want is not None:
        assert np.array_equal(got, want)
    else:  # wide rows: compare the sum itself (the slow model per element is too slow)
        r = rows.widen(_bf16(x))
        lay = rows.rms_layout(width)
        s = rows.sum_squares(r, lay)
        assert all(bits(s[m, 0]) == bits(_slow_sum_squares(r[m], 0)) for m in range(2))


def test_rms_tree_is_not_another_order():
    """The equality is not vacuous: other orders (float64 rounded once, a left-to-right fp32
    sum, the tree without the contraction) give other bits on some of 64 rows."""
    rng = np.random.default_rng(11)
    r = rows.widen(_bf16(rng.standard_normal((64, 4096)) * 3))
    got = bits(rows.sum_squares(r, rows.rms_layout(4096))[:, 0])
    once = (r.astype(np.float64) ** 2).sum(1).astype(F)
    seq = np.zeros(64, F)
    for i in range(4096):
        seq = (seq + r[:, i] * r[:, i]).astype(F)
    for other in (once, seq):
        assert (got != bits(other)).any()


def test_rms_per_lane_sums_at_small_blocks():
    """BLOCK <= 32: lanes keep their own (asymmetric) sums: not one value per row in general."""
    rng = np.random.default_rng(3)
    r = (rng.standard_normal((200, 16)) * 2.0 ** rng.integers(-12, 12, (200, 16))).astype(F)
    s = rows.sum_squares(r, rows.rms_layout(16))
    assert (s != s[:, :1]).any()
    for m in range(0, 200, 37):
        for i in (0, 5, 15):
            assert bits(s[m, i]) == bits(_slow_sum_squares(r[m], i))


def test_rms_edges_and_row_independence():
    w = np.ones(128, F)
    x = np.zeros((5, 128), F)
    x[1] = -0.0
    x[2, 3] = np.inf
    x[3, 7] = np.nan
    x[4] = 1e-45
    out = rows.rms_norm(_bf16(x), w, 1e-6)
    assert np.array_equal(out[0], np.zeros(128, np.uint16))
    assert (out[1] == 0x8000).all()  # -0 * inv * 1 keeps its sign
    assert out[2, 3] == 0x7FFF and (out[2, :3] == 0).all()  # inf * 0 -> NaN, others 0
    assert (out[3] == 0x7FFF).all()
    alone = np.stack([rows.rms_norm(_bf16(x[i : i + 1]), w, 1e-6)[0] for i in range(5)])
    assert np.array_equal(alone, out)


def test_add_and_fused_rms_norm():
    rng = np.random.default_rng(9)
    x, res = _bf16(rng.standard_normal((3, 256))), rng.standard_normal((3, 256)).astype(F)
    w = rng.standard_normal(256).astype(F)
    out, new = rows.add_rms_norm(x, res, w, 1e-5)
    assert np.array_equal(bits(new), bits((res + rows.widen(x)).astype(F)))
    assert np.array_equal(out, _bf16(_slow_rms(new, w, 1e-5)))
    partials = rng.standard_normal((2, 3, 256)).astype(F)
    lin, new2, normed = rows.sum_add_rms_norm(partials, None, res, w, 1e-5)
    assert np.array_equal(lin, _bf16(partials[0] + partials[1]))
    assert np.array_equal(normed, rows.add_rms_norm(lin, res, w, 1e-5)[0])


def test_head_rms_norm_is_rms_over_d():
    rng = np.random.default_rng(4)
    x = _bf16(rng.standard_normal((3, 4, 64)))
    w = rng.standard_normal(64).astype(F)
    got = rows.head_rms_norm(x, w, 1e-6)
    assert np.array_equal(got.reshape(12, 64), rows.rms_norm(x.reshape(12, 64), w, 1e-6))


def reduce_layout(width: int) -> tuple[int, int, list[int]]:
    import importlib
    import re

    import triton

    from samebits.kernels.triton import aot
    from samebits.kernels.triton.rows import row_num_warps

    fn = importlib.import_module("samebits.kernels.triton._row_kernels").rms_norm_kernel
    block = triton.next_power_of_2(width)
    consts = dict(WIDTH=width, BLOCK=block, ADD_RESIDUAL=False)
    ptrs = {"x_ptr": "*bf16", "res_ptr": "*fp32", "w_ptr": "*fp32", "out_ptr": "*bf16"}
    sig = aot.signature(fn, ptrs, consts, floats=["eps"])
    k = aot.compile_sm90(fn, sig, consts, {"num_warps": row_num_warps(block)})
    ttgir, ptx = k.asm["ttgir"], k.asm["ptx"]
    layouts = dict(re.findall(r"^(#\w+) = #ttg.blocked<\{sizePerThread = \[(\d+)\]", ttgir, re.M))
    arg = re.search(r'"tt.reduce"\((%\w+)\)', ttgir).group(1)
    lay = re.search(re.escape(arg) + r" = .*: tensor<\d+xf32, (#\w+)>", ttgir).group(1)
    shuffles = [int(o) for o in re.findall(r"bfly.b32\s+%r\d+, %r\d+, (\d+)", ptx)]
    return int(layouts[lay]), ptx.count("fma.rn.f32"), shuffles


def _compiled_layout(width: int) -> tuple[int, int, list[int]]:
    """`reduce_layout` in a fresh interpreter without TRITON_INTERPRET (the suite may set it)."""
    import inspect
    import json
    import os
    import subprocess
    import sys

    code = inspect.getsource(reduce_layout) + f"\nprint(json.dumps(reduce_layout({width})))"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run([sys.executable, "-c", "import json\n" + code], env=env,
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    spt, fmas, shuffles = json.loads(proc.stdout.strip().splitlines()[-1])
    return spt, fmas, shuffles


@pytest.mark.parametrize("width", [16, 64, 128, 576, 4096, 5120])
def test_rms_layout_is_tritons(width):
    """The layout rule equals the reduce operand's layout Triton 3.6 compiles for sm_90
    (16-byte aligned pointers, as the JIT specializes torch allocations)."""
    pytest.importorskip("triton")

    lay = rows.rms_layout(width)
    spt, fmas, shuffles = _compiled_layout(width)
    assert spt == lay.size_per_thread
    per = lay.per_thread
    assert fmas == (per - 1 if per > 1 else (1 if lay.lanes > 1 else 0))
    lane_steps = [lay.lanes >> i for i in range(1, lay.lanes.bit_length())]
    warp_steps = [lay.warps >> i for i in range(1, lay.warps.bit_length())]
    assert shuffles == lane_steps + warp_steps


# --- RoPE, gated activations, MoE --------------------------------------------------------


def test_rope_matches_slow_model():
    from samebits.model.rope_tables import rope_tables

    cos, sin = (t.numpy() for t in rope_tables(64, 10000.0, None, 64))
    rng = np.random.default_rng(2)
    x = _bf16(rng.standard_normal((3, 2, 64)) * 4)
    pos = np.array([0, 7, 63])
    got = rows.rope(x, pos, cos, sin)
    v = rows.widen(x)
    want = np.empty((3, 2, 64), F)
    for m in range(3):
        for h in range(2):
            for i in range(32):
                a, b, c, s = v[m, h, i], v[m, h, 32 + i], cos[pos[m], i], sin[pos[m], i]
                want[m, h, i] = cfma(a, c, -F(b * s))
                want[m, h, 32 + i] = cfma(a, s, F(b * c))
    assert np.array_equal(got, _bf16(want))
    q, k, vv = rows.qkv_rope_store(np.concatenate([x.reshape(3, -1)] * 3, 1)[:, :256], pos,
                                   cos, sin, 2, 1)  # fmt: skip
    assert np.array_equal(q, got) and np.array_equal(k, got[:, :1]) and vv.shape == (3, 1, 64)


def _slow_softexp(x: F) -> F:
    if np.isnan(x):
        return x
    xc = F(min(max(x, F(-104.0)), F(89.0)))
    n = F(cfma(xc, F(1.4426950408889634), F(12582912.0)) - F(12582912.0))
    r = cfma(n, F(-0.693359375), xc)
    r = cfma(n, F(2.12194440e-4), r)
    p = F(1.9875691500e-4)
    p = cfma(p, r, F(1.3981999507e-3))
    for c in (8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = cfma(p, r, F(c))
    e = F(cfma(p, F(r * r), r) + F(1.0))
    k = int(n)
    k1 = k // 2
    with np.errstate(all="ignore"):
        return F(F(e * F(2.0 ** (k - k1))) * F(2.0**k1))


def test_softexp_matches_slow_model():
    rng = np.random.default_rng(8)
    x = np.concatenate([rng.uniform(-110, 95, 4000).astype(F), EDGE, -EDGE])
    want = np.array([_slow_softexp(v) for v in x], F)
    assert np.array_equal(bits(softexp(x)), bits(want))


def test_silu_and_gelu_match_slow_model():
    rng = np.random.default_rng(6)
    gu = _bf16(rng.standard_normal((2, 96)) * 6)
    gu[0, :6] = [0, 0x8000, 0x7F80, 0xFF80, 0x7FC0, 0x0001]
    g, u = rows.widen(gu[:, :48]), rows.widen(gu[:, 48:])
    with np.errstate(all="ignore"):
        silu = np.array([[F(F(a / F(1 + _slow_softexp(F(0) - a))) * b) for a, b in
                          zip(gr, ur, strict=True)] for gr, ur in zip(g, u, strict=True)])  # fmt: skip
        q = np.array([[cfma(F(a * a), rows.GELU_K2, rows.GELU_K1) for a in gr] for gr in g])
        nz = np.array([[cfma(-qq, a, F(0)) for qq, a in zip(qr, gr, strict=True)]
                       for qr, gr in zip(q, g, strict=True)])  # fmt: skip
        gelu = np.array([[F(F(a / F(1 + _slow_softexp(z))) * b) for a, z, b in
                          zip(gr, zr, ur, strict=True)] for gr, zr, ur in zip(g, nz, u, strict=True)])  # fmt: skip
    assert np.array_equal(rows.silu_mul(gu), _bf16(silu))
    assert np.array_equal(rows.gelu_mul(gu), _bf16(gelu))


def test_moe_route_and_combine_equal_torch_ops():
    torch = pytest.importorskip("torch")
    from samebits.kernels import moe

    rng = np.random.default_rng(1)
    lg = (rng.standard_normal((40, 60)) * 4).astype(F)
    lg[3, 5] = lg[3, 7] = lg[3].max() + 1  # a tie: the lower id first
    lg[4] = 0.0
    lg[5, 2] = -np.inf
    for k, norm in ((2, True), (4, False), (8, True)):
        ids, w = moe.route(torch.from_numpy(lg), k, norm)
        rid, rw = rmoe.route(lg, k, norm)
        assert np.array_equal(ids.numpy(), rid) and np.array_equal(bits(w.numpy()), bits(rw))
    o = torch.from_numpy(rng.standard_normal((40, 8, 32)).astype(F)).bfloat16()
    want = moe.combine(o, w, torch.bfloat16).view(torch.int16).numpy().view(np.uint16)
    got = rmoe.combine(o.view(torch.int16).numpy().view(np.uint16), rw, "bfloat16")
    assert np.array_equal(got, want)


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        rows.rms_norm(np.zeros((2, 3), np.int8), np.ones(3, F), 1e-6)
    with pytest.raises(ValueError):
        rows.rms_norm(np.zeros((2, 3), np.uint16), np.ones(4, F), 1e-6)
    with pytest.raises(ValueError):
        rows.rope(np.zeros((1, 1, 3), np.uint16), [0], np.zeros((1, 1), F), np.zeros((1, 1), F))
    with pytest.raises(ValueError):
        rows.silu_mul(np.zeros((1, 3), np.uint16))
    with pytest.raises(ValueError):
        rmoe.route(np.zeros((2, 4), F), 5, True)


def test_softexp_kernel_scaling_equals_the_replay_scaling():
    """The kernel's integer k (the bits of t minus those of 1.5 * 2^23) and its scaling (an
    exponent add into e, then one multiply) give the replay's bits (k = n converted; two
    multiplies) on a dense grid of [-110, 95] and around every integer multiple of ln 2."""
    from samebits.kernels.replay import softexp as sx

    rng = np.random.default_rng(7)
    x = np.concatenate([np.linspace(-110, 95, 2_000_001, dtype=F),
                        (np.arange(-151, 130) * np.log(2.0)).astype(F) + rng.uniform(
                            -1e-3, 1e-3, 281).astype(F)]).astype(F)  # fmt: skip
    xc = np.minimum(np.maximum(x, sx.X_LO), sx.X_HI)
    t = sx.fma_f32(xc, sx.LOG2E, sx.SHIFT)
    n = sx.add_f32(t, -sx.SHIFT)
    k = t.view(np.int32) - np.int32(0x4B400000)
    assert np.array_equal(k, n.astype(np.int32))
    r = sx.fma_f32(n, sx.NEG_LN2_HI, xc)
    r = sx.fma_f32(n, sx.NEG_LN2_LO, r)
    p = sx.fma_f32(sx.POLY[0], r, sx.POLY[1])
    for c in sx.POLY[2:]:
        p = sx.fma_f32(p, r, c)
    e = sx.add_f32(sx.fma_f32(p, sx.mul_f32(r, r), r), sx.ONE)
    k1 = k >> 1
    scaled = (e.view(np.int32) + (k1 << 23)).view(F)
    assert np.array_equal(scaled, sx.mul_f32(e, sx._pow2(k1)))  # the exponent add is exact
    y = sx.mul_f32(scaled, sx._pow2(k - k1))
    assert np.array_equal(bits(y), bits(softexp(x)))


# --- the soft exp2 (kernels/triton/_softexp2.py; not launched yet) ---------------------


def test_softexp2_accuracy_within_1_ulp():
    from samebits.kernels.replay.softexp import softexp2

    rng = np.random.default_rng(11)
    x = np.concatenate([np.linspace(-152, 129, 2_000_001, dtype=F),
                        rng.uniform(-1, 1, 500_000).astype(F)])  # fmt: skip
    y = softexp2(x).astype(np.float64)
    ref = np.exp2(x.astype(np.float64))
    normal = (ref > 2.0**-126) & (ref < 3.4e38)
    ulp = np.spacing(ref[normal].astype(F)).astype(np.float64)
    assert (np.abs(y[normal] - ref[normal]) / ulp).max() <= 1.0
    sub = ref <= 2.0**-126  # subnormal results: within one subnormal ulp (no flush to zero)
    assert (np.abs(y[sub] - ref[sub]) <= 2.0**-149).all() and (y[sub & (ref > 2.0**-149)] > 0).all()


def test_softexp2_edges():
    from samebits.kernels.replay.softexp import softexp2

    x = np.array([0.0, -0.0, -np.inf, np.inf, -151.5, -200.0, 128.0, 300.0, -149.0, 1.0, -1.0,
                  0.5, 127.0], F)  # fmt: skip
    y = softexp2(x)
    assert bits(y[:2]).tolist() == [bits(F(1.0))[()]] * 2
    assert bits(y[[2, 4, 5]]).tolist() == [0, 0, 0]  # +0, never -0 (exp2(-inf - m) = +0)
    assert np.isposinf(y[[3, 6, 7]]).all()
    assert bits(y[8]) == 1 and y[9] == 2 and y[10] == 0.5 and y[12] == F(2.0**127)
    assert y[11] == F(np.sqrt(2.0))  # correctly rounded here
    nan = np.array([0x7FC00001, 0xFFC12345], np.uint32).view(F)
    assert np.array_equal(bits(softexp2(nan)), bits(nan))
