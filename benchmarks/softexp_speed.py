"""Speed of the soft-exp SiLU / GeGLU kernels (launched by the GPU plan since issue 27) against
the tl.exp kernels they replaced, and their bits against the CPU replay (issue 27: the
invariant plan's speed within 3% after the exp change).

Usage (on the H200, from the repo root):
    PYTHONPATH=$PWD/src python benchmarks/softexp_speed.py --out $OUT/softexp_speed.json
CPU smoke run (Triton interpreter, tiny shapes, no timing):
    TRITON_INTERPRET=1 PYTHONPATH=src python benchmarks/softexp_speed.py --smoke --out X.json

For M in {1, 16, 64, 256} and widths 14336 / 8192 / 768 (inner width I; gate_up [M, 2I] bf16):
- time (``triton.testing.do_bench``: median of repeated launches, the L2 flushed before each,
  launch overhead not on the clock) of ``silu.tl_exp`` (the replaced kernel, reproduced here
  as a baseline, never launched by the engine), ``silu.softexp`` (``rows.silu_mul``, the
  launched kernel) and the same for GeGLU; ``ratio`` = soft / tl.exp;
- the same two in a CUDA graph (``do_bench_cudagraph``: warm L2, no host launch cost),
  ``graph_ratio``; the earlier figure 34.9 -> 76.6 us at M = 64 (replay_rows_check.py, one
  launch between two CUDA events) held the host's launch time, not the kernel's (the
  profiler's silu_mul_kernel at b64 decode: 2.7 us per call);
- launch variants of the soft-exp kernel (column BLOCK x num_warps, each a fixed function of
  the width: the plan's launch must not follow M), timed the same way, so the lead can pick
  one launch for every M (the bits do not depend on it: checked);
- bits: every soft-exp output (launched and variants) against `replay.rows.silu_mul` /
  `gelu_mul` on the same inputs (random rows times 4 plus an edge row: +-0, +-inf, NaN, huge
  and tiny values), as mismatching elements (integer views, no tolerance).

Exit status 0 when every soft-exp output equals the replay. Output JSON: ``speed`` rows
(kernel, width, M, us) and ``ratio``, ``variants``, ``bits`` (mismatches per case),
``mismatching``, the device and versions.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

MS = (1, 16, 64, 256)
WIDTHS = (14336, 8192, 768)
VARIANTS = ((1024, 4), (1024, 8), (2048, 4), (2048, 8), (4096, 8), (512, 4))  # (BLOCK, warps)
EDGE = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 3e38, -3e38, 90.0, -90.0,
                 104.0, -104.0, 20.0, -20.0, 1.0], np.float32)  # fmt: skip


@triton.jit
def gated_tlexp_kernel(gu_ptr, out_ptr, INNER: tl.constexpr, BLOCK: tl.constexpr,
                       GELU: tl.constexpr):  # fmt: skip
    """Baseline: the SiLU (GELU False) / GeGLU kernel before issue 27 (``tl.exp``, PTX
    ex2.approx)."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < INNER
    g = tl.load(gu_ptr + row * (2 * INNER) + cols, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(gu_ptr + row * (2 * INNER) + INNER + cols, mask=mask, other=0.0).to(tl.float32)
    z = g * (1.5957691216057308 + 0.07135481627260025 * (g * g)) if GELU else g
    act = tl.math.div_rn(g, 1.0 + tl.exp(-z))
    tl.store(out_ptr + row * INNER + cols, (act * u).to(out_ptr.dtype.element_ty), mask=mask)


def _launch(kernel, gu, block: int, warps: int, **consts):
    """One launch of a gated kernel at (BLOCK, warps): grid (M, cdiv(I, BLOCK))."""
    import torch

    m, inner = gu.shape[0], gu.shape[1] // 2
    out = torch.empty((m, inner), device=gu.device, dtype=gu.dtype)
    kernel[(m, triton.cdiv(inner, block))](gu, out, INNER=inner, BLOCK=block, num_warps=warps,
                                           **consts)  # fmt: skip
    return out


def inputs(rng, m: int, inner: int, device: str, smoke: bool):
    """gate_up [m, 2I] bf16: normal rows times 4, the first row's head the edge values (smoke:
    the same bf16 values held in fp32, the interpreter's bf16 casts not being the GPU's)."""
    import torch

    x = (rng.standard_normal((m, 2 * inner)) * 4).astype(np.float32)
    n = min(len(EDGE), inner)
    x[0, :n] = EDGE[:n]
    x[0, inner : inner + n] = 1.0
    gu = torch.from_numpy(x).to(device).bfloat16()
    return gu.float() if smoke else gu


def _bits(t) -> np.ndarray:
    """The integer view of a bf16 (uint16) or fp32 (uint32) tensor."""
    import torch

    if t.dtype == torch.float32:
        return t.detach().cpu().numpy().view(np.uint32)
    return t.detach().cpu().view(torch.int16).numpy().view(np.uint16)


def mismatches(out, want: np.ndarray, smoke: bool = False) -> int:
    """Elements whose bits differ (smoke: the interpreter's NaN, 0xFFC00000, made the GPU's
    canonical 0x7FFFFFFF first; the GPU run compares raw bits)."""
    got = _bits(out).reshape(want.shape)
    if smoke:
        from samebits.kernels.replay.softexp import canon

        got = canon(got.view(np.float32)).view(np.uint32)
    return int(np.count_nonzero(got != want))


def graph_us(fn, smoke: bool) -> float | None:
    """Median microseconds of ``fn`` replayed in a CUDA graph (no launch overhead, warm L2),
    None when smoke-testing."""
    if smoke:
        return None
    from triton.testing import do_bench_cudagraph

    return float(do_bench_cudagraph(fn, rep=100, return_mode="median")) * 1e3


def time_us(fn, smoke: bool) -> float | None:
    """Median microseconds of ``fn`` (do_bench: L2 flushed before each launch), None when
    smoke-testing on the interpreter."""
    if smoke:
        fn()
        return None
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median")) * 1e3


def exact_interpreter_fma() -> None:
    """The Triton interpreter's ``tl.fma`` made one rounding (it computes ``a * b + c`` in
    fp32, two roundings): `replay.softexp.fma_f32`. Smoke runs only; the GPU's is exact."""
    from triton.runtime import interpreter
    from triton.runtime.interpreter import TensorHandle

    from samebits.kernels.replay.softexp import fma_f32

    def create_fma(self, x, y, z):
        return TensorHandle(fma_f32(x.data, y.data, z.data), z.dtype.scalar)

    interpreter.InterpreterBuilder.create_fma = create_fma


def _ratio(a: float | None, b: float | None) -> float | None:
    """a / b, None when either was not timed (smoke)."""
    return None if a is None or b is None else a / b


def run(ms, widths, variants, device: str, smoke: bool, seed: int = 0) -> dict:
    from samebits.kernels.replay import rows as rr
    from samebits.kernels.triton import rows
    from samebits.kernels.triton._gelu_kernel import gelu_mul_kernel
    from samebits.kernels.triton._row_kernels import silu_mul_kernel

    rng = np.random.default_rng(seed)
    ops = {"silu": (False, silu_mul_kernel, rows.silu_mul, rr.silu_mul),
           "gelu": (True, gelu_mul_kernel, rows.gelu_mul, rr.gelu_mul)}  # fmt: skip
    speed, variant_rows, bits = [], [], []
    for inner in widths:
        for m in ms:
            gu = inputs(rng, m, inner, device, smoke)
            for op, (gelu, soft, launched, replay) in ops.items():
                x = gu.cpu().numpy() if smoke else _bits(gu)  # fp32 values, or bf16 bits
                want = replay(x, "float32" if smoke else "bfloat16")
                block = min(rows.SILU_BLOCK, triton.next_power_of_2(inner))
                base = partial(_launch, gated_tlexp_kernel, gu, block, rows.SILU_WARPS, GELU=gelu)
                t_base = time_us(base, smoke)
                t_soft = time_us(lambda: launched(gu), smoke)  # noqa: B023
                bits.append(dict(kernel=f"{op}.softexp", launch="launched", width=inner, m=m,
                                 mismatches=mismatches(launched(gu), want, smoke), elements=want.size))  # fmt: skip
                g_base = graph_us(base, smoke)
                g_soft = graph_us(lambda: launched(gu), smoke)  # noqa: B023
                speed.append(dict(op=op, width=inner, m=m, tl_exp_us=t_base, softexp_us=t_soft,
                                  ratio=_ratio(t_soft, t_base),
                                  graph_tl_exp_us=g_base, graph_softexp_us=g_soft,
                                  graph_ratio=_ratio(g_soft, g_base)))  # fmt: skip
                for vb, vw in variants:
                    out = _launch(soft, gu, vb, vw)
                    bits.append(dict(kernel=f"{op}.softexp", launch=f"block{vb}.w{vw}",
                                     width=inner, m=m, mismatches=mismatches(out, want, smoke),
                                     elements=want.size))  # fmt: skip
                    t = time_us(lambda: _launch(soft, gu, vb, vw), smoke)  # noqa: B023
                    variant_rows.append(dict(op=op, width=inner, m=m, block=vb, warps=vw, us=t,
                                             ratio=_ratio(t, t_base)))  # fmt: skip
            if not smoke:
                s = [r for r in speed if r["width"] == inner and r["m"] == m]
                print(f"I={inner} M={m}: " + ", ".join(
                    f"{r['op']} {r['tl_exp_us']:.1f} -> {r['softexp_us']:.1f} us "
                    f"({r['ratio']:.3f}x)" for r in s), flush=True)  # fmt: skip
    bad = [b for b in bits if b["mismatches"]]
    return dict(speed=speed, variants=variant_rows, bits=bits, mismatching=len(bad))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="CPU interpreter (TRITON_INTERPRET=1): M 1, 3; width 768; no timing",
    )
    args = ap.parse_args()
    t0 = time.time()
    if args.smoke:
        if os.environ.get("TRITON_INTERPRET") != "1":
            ap.error("--smoke needs TRITON_INTERPRET=1")
        exact_interpreter_fma()
        res = run((1, 3), (768,), ((256, 4), (1024, 4)), "cpu", True, args.seed)
    else:
        import torch

        res = run(MS, WIDTHS, VARIANTS, "cuda", False, args.seed)
        res["device"] = torch.cuda.get_device_name()
        res["torch"], res["triton"] = torch.__version__, triton.__version__
    res["wall_s"] = time.time() - t0
    Path(args.out).write_text(json.dumps(res, indent=1))
    print(f"{res['mismatching']} soft-exp cases differ from the CPU replay; "
          f"{res['wall_s']:.1f} s", flush=True)  # fmt: skip
    return 0 if res["mismatching"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
