"""The split-KV probe's launch shapes (`benchmarks/split_probe_shapes.py`: head-dim slices of
the P @ V chain, scores computed first, K / V in HND pages) store the span states of the shipped
`split_span_kernel`, bit for bit, so the probe's GPU timings compare launches of one
definition (CPU interpreter, fp32; the probe checks the bits again on the GPU)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from triton_bits import same_bits

from samebits.kernels.triton._attention_kernel import merge_spans_kernel, split_span_kernel
from samebits.kernels.triton.attention import FULL_WINDOW, KEY_BLOCK, LOG2E

D, HKV, GROUP, PAGE, SPAN = 128, 2, 4, 16, 512  # D 128: every dslice variant slices
_PATH = Path(__file__).resolve().parents[3] / "benchmarks" / "split_probe_shapes.py"


def _shapes():
    spec = importlib.util.spec_from_file_location("split_probe_shapes", _PATH)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


S = _shapes()


def _case(positions: list[int]) -> dict:
    g = torch.Generator().manual_seed(3)
    r = len(positions)
    blocks = max(positions) // PAGE + 1
    tables = np.random.default_rng(5).permutation(r * blocks).reshape(r, blocks).astype(np.int32)
    slots = r * blocks * PAGE
    max_position = max(positions)
    k, v = (torch.randn(slots, HKV, D, generator=g) for _ in range(2))
    for req, pos in enumerate(positions):  # slots past a request's last key hold NaN, as an
        keys = np.arange(pos + 1, blocks * PAGE)  # unwritten cache may: no launch may read them
        unwritten = torch.from_numpy(
            tables[req, keys // PAGE].astype(np.int64) * PAGE + keys % PAGE
        )
        k[unwritten], v[unwritten] = float("nan"), float("nan")
    return dict(
        q=torch.randn(r, HKV * GROUP, D, generator=g), k=k, v=v, k_hnd=S.hnd_pages(k, PAGE),
        v_hnd=S.hnd_pages(v, PAGE), pos=torch.tensor(positions, dtype=torch.int32),
        bt=torch.from_numpy(tables), max_spans=max_position // SPAN + 1, scale=D**-0.5 * LOG2E,
        max_position=max_position, group=GROUP, d=D, page=PAGE, block_m=16, block_n=KEY_BLOCK,
        span=SPAN,
    )  # fmt: skip


def _states(a: dict) -> dict:
    n = a["q"].shape[0] * a["max_spans"] * HKV * GROUP
    return dict(m_s=torch.full((n,), float("nan")), l_s=torch.full((n,), float("nan")),
                acc_s=torch.full((n * D,), float("nan")))  # fmt: skip


def _merged(a: dict) -> torch.Tensor:
    out = torch.empty_like(a["q"])
    merge_spans_kernel[(a["q"].shape[0], HKV)](
        out, a["m_s"], a["l_s"], a["acc_s"], a["pos"], a["max_spans"], a["window"], HKV=HKV,
        GROUP=GROUP, D=D, BLOCK_M=GROUP, SPAN=SPAN, UNROLL=4)  # fmt: skip
    return out


def _shipped(a: dict, splits: int) -> torch.Tensor:
    split_span_kernel[(HKV, splits, a["q"].shape[0])](
        a["q"], a["k"], a["v"], a["m_s"], a["l_s"], a["acc_s"], a["pos"], a["bt"],
        a["bt"].shape[1], a["max_spans"], a["scale"], a["window"], HKV=HKV, GROUP=GROUP, D=D,
        PAGE=PAGE, BLOCK_M=16, BLOCK_N=KEY_BLOCK, SPAN=SPAN)  # fmt: skip
    return _merged(a)


@pytest.mark.parametrize("variant", S.SHAPE_VARIANTS, ids=lambda v: v[0])
@pytest.mark.parametrize("window", [FULL_WINDOW, 600])
def test_probe_shape_stores_the_shipped_span_states(variant, window):
    case = _case([1300, 700])
    for splits in (1, case["max_spans"]):
        ref = {**case, "window": window, **_states(case)}
        want = _shipped(ref, splits)
        got = {**case, "window": window, **_states(case)}
        stride = S.scores_stride(case["max_position"], KEY_BLOCK)
        scores = torch.full((case["q"].shape[0] * HKV * GROUP * stride,), float("nan"))
        S.launch_shape(variant, got, scores, (HKV, splits, case["q"].shape[0]), {})
        for name in ("m_s", "l_s", "acc_s"):
            assert same_bits(got[name], ref[name]), (variant[0], splits, name)
        assert same_bits(_merged(got), want)
        assert torch.isfinite(want).all()
