"""The Triton soft exp (`_row_kernels.softexp`) and the launched SiLU / GeGLU kernels on the
CPU interpreter, bit for bit against the CPU replay (`replay.softexp`, `replay.rows.silu_mul`,
`replay.rows.gelu_mul`).

The stock interpreter computes ``tl.fma`` as ``a * b + c`` in fp32 (two roundings); here it is
made the exact fma (`replay.softexp.fma_f32`, itself tested against the C library's fmaf), so
the test checks that the kernel source states the replay's sequence (constants, order, range
reduction, scaling, NaN select; GeGLU's two fmas are written in the kernel). What it cannot
show: contractions the GPU compiler would add (the interpreter contracts nothing; the PTX of
the soft-exp kernels had none beyond the stated ``tl.fma``s: benchmarks/ptx_survey_aot.py),
and the GPU's NaN bits: benchmarks/softexp_speed.py checks the GPU bits."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import triton
import triton.language as tl
from triton.runtime import interpreter
from triton.runtime.interpreter import TensorHandle

from samebits.kernels.replay import rows as rrows
from samebits.kernels.replay.softexp import fma_f32, softexp, softexp2
from samebits.kernels.triton._gelu_kernel import gelu_mul_kernel
from samebits.kernels.triton._row_kernels import silu_mul_kernel
from samebits.kernels.triton._row_kernels import softexp as tl_softexp
from samebits.kernels.triton._softexp2 import softexp2 as tl_softexp2
from samebits.kernels.triton._softexp2 import softexp2_nonpos as tl_softexp2_nonpos


@pytest.fixture(autouse=True)
def _exact_fma(monkeypatch):
    def create_fma(self, x, y, z):
        return TensorHandle(fma_f32(x.data, y.data, z.data), z.dtype.scalar)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_fma", create_fma)


@triton.jit
def _softexp_kernel(x_ptr, y_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < N, other=0.0)
    tl.store(y_ptr + i, tl_softexp(x), mask=i < N)


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.numpy().view(np.uint32)


def test_triton_softexp_equals_replay():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.uniform(-110, 95, 4000), np.linspace(-104, 89, 3000),
                        [0.0, -0.0, np.inf, -np.inf, 1e-45, -88.0, 88.7]]).astype(np.float32)  # fmt: skip
    xt = torch.from_numpy(x)
    y = torch.empty_like(xt)
    _softexp_kernel[(triton.cdiv(len(x), 1024),)](xt, y, N=len(x), BLOCK=1024)
    assert np.array_equal(_bits(y), softexp(x).view(np.uint32))
    plain = np.exp(x.astype(np.float64)).astype(np.float32)  # not vacuous: another exp differs
    assert not np.array_equal(_bits(y), plain.view(np.uint32))


def test_silu_kernel_equals_replay():
    g = torch.Generator().manual_seed(3)
    gu = (torch.randn((5, 2 * 1500), generator=g) * 6).bfloat16().float()
    gu[0, :4] = torch.tensor([0.0, -0.0, 200.0, -200.0])
    out = torch.empty((5, 1500))
    silu_mul_kernel[(5, 2)](gu, out, INNER=1500, BLOCK=1024)
    want = rrows.silu_mul(gu.numpy(), "float32")
    assert np.array_equal(_bits(out), want)


def test_gelu_kernel_equals_replay():
    g = torch.Generator().manual_seed(4)
    gu = (torch.randn((5, 2 * 1500), generator=g) * 6).bfloat16().float()
    gu[0, :6] = torch.tensor([0.0, -0.0, 200.0, -200.0, 12.0, -12.0])
    out = torch.empty((5, 1500))
    gelu_mul_kernel[(5, 2)](gu, out, INNER=1500, BLOCK=1024)
    want = rrows.gelu_mul(gu.numpy(), "float32")
    assert np.array_equal(_bits(out), want)


@triton.jit
def _softexp2_kernel(x_ptr, y_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < N, other=0.0)
    tl.store(y_ptr + i, tl_softexp2(x), mask=i < N)


def test_triton_softexp2_equals_replay():
    rng = np.random.default_rng(1)
    x = np.concatenate([rng.uniform(-160, 135, 4000), np.linspace(-151, 128, 3000),
                        rng.uniform(-1, 1, 1000),
                        [0.0, -0.0, np.inf, -np.inf, 1e-45, -149.0, 127.5]]).astype(np.float32)  # fmt: skip
    xt = torch.from_numpy(x)
    y = torch.empty_like(xt)
    _softexp2_kernel[(triton.cdiv(len(x), 1024),)](xt, y, N=len(x), BLOCK=1024)
    assert np.array_equal(_bits(y), softexp2(x).view(np.uint32))
    assert not np.array_equal(_bits(y), np.exp2(x).astype(np.float32).view(np.uint32))


@triton.jit
def _nonpos_kernel(x_ptr, y_ptr, N: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + i, mask=i < N, other=0.0)
    tl.store(y_ptr + i, tl_softexp2_nonpos(x), mask=i < N)


def _nonpos_inputs() -> np.ndarray:
    """Every fp32 in [-151, -120], samples of (-inf, 0], and the special values."""
    lo, hi = np.float32(-120.0).view(np.uint32), np.float32(-151.0).view(np.uint32)
    dense = np.arange(lo, hi + 1, dtype=np.uint32).view(np.float32)
    rng = np.random.default_rng(5)
    wide = -np.exp2(rng.uniform(-149, 8, 400_000)).astype(np.float32)
    special = [0.0, -0.0, -np.inf, np.nan, -1e-45, -0.5, -1.0, -126.0, -149.5, -151.5, -1e30]
    return np.concatenate([dense, wide, np.float32(special)]).astype(np.float32)


def test_softexp2_nonpos_equals_softexp2_on_nonpositive_inputs():
    # the attention kernel's exponentials (x <= 0 or NaN) by the shorter sequence: same bits
    x = _nonpos_inputs()
    y = torch.empty(x.size, dtype=torch.float32)
    _nonpos_kernel[(triton.cdiv(x.size, 1 << 16),)](torch.from_numpy(x), y, N=x.size,
                                                    BLOCK=1 << 16)  # fmt: skip
    got, want = _bits(y), softexp2(x).view(np.uint32)
    nan = np.isnan(x)
    assert np.array_equal(got[~nan], want[~nan]) and np.isnan(y.numpy()[nan]).all()
    # the range holds the cases the shorter scaling must get right: zeros and subnormals
    assert (want[x <= -150] == 0).all() and (want[(x > -149) & (x < -126)] != 0).all()


def _speed_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "benchmarks" / "softexp_speed.py"
    spec = importlib.util.spec_from_file_location("softexp_speed", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_softexp_speed_script_smoke():
    """benchmarks/softexp_speed.py on the interpreter: the launched SiLU / GeGLU and a launch
    variant give the replay's bits (NaN canonicalized), and its comparison sees a flipped bit."""
    b = _speed_script()
    res = b.run((1, 3), (768,), ((256, 4),), "cpu", True)
    assert len(res["bits"]) == 8 and res["mismatching"] == 0, res["bits"]
    gu = b.inputs(np.random.default_rng(0), 2, 768, "cpu", True)
    want = rrows.silu_mul(gu.numpy(), "float32")
    from samebits.kernels.triton import rows

    out = rows.silu_mul(gu)
    assert b.mismatches(out, want, True) == 0
    assert b.mismatches(out, want ^ np.uint32(1), True) == want.size


def test_the_plan_names_the_soft_exp_and_no_kernel_calls_tl_exp():
    """The fingerprint's plan description (`describe`) names the soft exp of the gated ops,
    and neither launched kernel file calls ``tl.exp`` any more."""
    from pathlib import Path

    from samebits.kernels.triton.describe import describe

    ops = describe()
    assert "softexp" in ops["silu_mul"] and "softexp" in ops["gelu_mul"]
    kdir = Path(__file__).resolve().parents[3] / "src" / "samebits" / "kernels" / "triton"
    for name in ("_row_kernels.py", "_gelu_kernel.py"):
        assert "tl.exp(" not in (kdir / name).read_text(), name
