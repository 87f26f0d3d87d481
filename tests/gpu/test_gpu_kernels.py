"""Bitwise invariance of the Triton kernels on the GPU in bfloat16, on Llama-3-8B shapes:
linear rows at M = 1 ... 8192 against the row computed alone, every launch of the tables,
attention whole vs chunked prefill vs decode, permuted block tables and page sizes, mixed
batches, forced tile heights; row kernels at any M. Comparisons are integer views."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
LLAMA3_8B = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096),
             "down": (4096, 14336), "lm_head": (128256, 4096)}  # fmt: skip
M_SWEEP = (1, 2, 3, 8, 16, 31, 32, 64, 65, 128, 256, 257, 512, 1024, 1025, 2048, 4096, 8192)
SAMPLED_ROWS = (0, 1, 17, 63, 64, 1000, 4095, 8191)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def rows_differing(a: torch.Tensor, b: torch.Tensor) -> int:
    assert a.shape == b.shape and a.dtype == b.dtype
    return int((bits(a) != bits(b)).reshape(a.shape[0], -1).any(1).sum())


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


@pytest.mark.parametrize("role", list(LLAMA3_8B))
def test_linear_rows_any_m_equal_row_alone(cuda, role, gpu_record):
    from samebits.kernels.triton.backend import QualifiedLinear

    n, k = LLAMA3_8B[role]
    g = _gen(n + k)
    x = torch.randn((8192, k), device="cuda", generator=g).to(BF16)
    w = (torch.randn((n, k), device="cuda", generator=g) / k**0.5).to(BF16)
    lin = QualifiedLinear(w, None, role, torch.float32 if role == "lm_head" else BF16)
    alone = {r: lin(x[r : r + 1]) for r in SAMPLED_ROWS}
    sweep = [m for m in M_SWEEP if role != "lm_head" or m <= 1024]
    bad, compared = 0, 0
    for m in sweep:
        y = lin(x[:m])
        for r in (r for r in SAMPLED_ROWS if r < m):
            bad += rows_differing(y[r : r + 1], alone[r])
            compared += 1
    gpu_record(f"linear {role} {n}x{k} {lin.plan}", f"{compared} rows vs alone, {bad} differ")
    assert bad == 0
    assert lin.qualify()


@pytest.mark.parametrize("role", ["o", "down", "qkv", "gate_up"])
def test_linear_every_launch_same_bits(cuda, role, gpu_record):
    from samebits.kernels.triton.certified.units import plan_launches
    from samebits.kernels.triton.linear import linear, split_plan

    n, k = LLAMA3_8B[role]
    g = _gen(7)
    x = torch.randn((100, k), device="cuda", generator=g).to(BF16)
    w = (torch.randn((n, k), device="cuda", generator=g) / k**0.5).to(BF16)
    b = torch.randn((n,), device="cuda", generator=g)
    plan = split_plan(n, k, role)
    ref = torch.cat([linear(x[i : i + 1], w, b, plan, BF16) for i in range(100)])
    bad, launches = 0, 0
    for launch in plan_launches(plan):  # every launch the engine may choose, TMA or not
        y = linear(x, w, b, plan, BF16, launch)
        bad += rows_differing(y, ref)
        launches += 1
    gpu_record(f"linear launches {role} S={plan.splits}", f"{launches} launches, {bad} rows differ")
    assert bad == 0


def _paged(kv: torch.Tensor, table: np.ndarray, block: int, slots: int) -> torch.Tensor:
    cache = torch.zeros((slots, *kv.shape[1:]), device="cuda", dtype=kv.dtype)
    pos = np.arange(kv.shape[0])
    cache[torch.from_numpy(table[pos // block] * block + pos % block).cuda()] = kv
    return cache


def _attend(q, layout, spans, group, block_m=None, warps=4):
    from samebits.kernels.triton.attention import attention_metadata, paged_attention

    kc, vc, table, block = layout
    qq = torch.cat([q[a:b] for a, b in spans]).contiguous()
    pos = np.concatenate([np.arange(a, b) for a, b in spans])
    qsl = np.cumsum([0] + [b - a for a, b in spans])
    tables = np.repeat(table[None], len(spans), 0)
    meta = attention_metadata(pos, qsl, tables, block, group, "cuda", block_m, warps)
    return paged_attention(qq, kc, vc, meta, q.shape[-1] ** -0.5)


def test_attention_prefill_chunks_decode_pages(cuda, gpu_record):
    heads, kv_heads, dim, length, group = 32, 8, 128, 1000, 4
    g = _gen(11)
    q = torch.randn((length, heads, dim), device="cuda", generator=g).to(BF16)
    k, v = (torch.randn((length, kv_heads, dim), device="cuda", generator=g).to(BF16) for _ in "kv")
    layouts = []
    for block, seed in ((16, 0), (16, 1), (32, 2), (64, 3)):
        nb = -(-length // block) + 3
        table = np.random.default_rng(seed).permutation(nb).astype(np.int64)
        layouts.append((_paged(k, table, block, nb * block), _paged(v, table, block, nb * block),
                        table, block))  # fmt: skip
    ref = _attend(q, layouts[0], [(0, length)], group)
    checks = {}
    for i, layout in enumerate(layouts[1:], 1):
        checks[f"layout{i}"] = rows_differing(_attend(q, layout, [(0, length)], group), ref)
    for chunk in (1, 7, 100, 333):
        spans = [(a, min(length, a + chunk)) for a in range(0, length, chunk)]
        for block_m, warps in ((None, 4), (16, 4), (64, 8), (128, 8)):
            out = torch.cat([_attend(q, layouts[1], [s], group, block_m, warps) for s in spans])
            checks[f"chunk{chunk}/bm{block_m}/w{warps}"] = rows_differing(out, ref)
    # every position as its own one-token request in one decode call (1000 x 8 programs)
    decode = _attend(q, layouts[1], [(t, t + 1) for t in range(length)], group)
    checks["decode batch of 1000 requests"] = rows_differing(decode, ref)
    mixed = _attend(q, layouts[2], [(700, 701), (50, 90), (0, length), (999, 1000)], group)
    want = torch.cat([ref[700:701], ref[50:90], ref, ref[999:1000]])
    checks["mixed batch"] = rows_differing(mixed, want)
    bad = {key: n for key, n in checks.items() if n}
    gpu_record("attention L=1000 H=32 HKV=8 D=128", f"{len(checks)} configs, rows differing {bad}")
    assert bad == {}


def test_row_kernels_any_m(cuda, gpu_record):
    from samebits.kernels.triton import rows

    g = _gen(5)
    x = torch.randn((8192, 4096), device="cuda", generator=g).to(BF16)
    res = torch.randn((8192, 4096), device="cuda", generator=g)
    w = torch.randn((4096,), device="cuda", generator=g)
    gu = torch.randn((8192, 2 * 14336), device="cuda", generator=g).to(BF16)
    heads = torch.randn((8192, 8, 128), device="cuda", generator=g).to(BF16)
    cos, sin = torch.randn((2, 9000, 64), device="cuda", generator=g)
    pos = torch.randint(0, 9000, (8192,), device="cuda", generator=g)

    def ops(m: int) -> list[torch.Tensor]:
        r = res[:m].clone()
        h = heads[:m].clone()
        rows.rope(h, pos[:m].contiguous(), cos, sin)
        hn = h.clone()
        rows.head_rms_norm(hn, w[:128].contiguous(), 1e-6)
        return [rows.rms_norm(x[:m], w, 1e-5, BF16), rows.add_rms_norm(x[:m], r, w, 1e-5, BF16),
                r, rows.silu_mul(gu[:m]), h, hn]  # fmt: skip

    full = ops(8192)
    bad = 0
    for m in (1, 3, 64, 1000):
        for a, b in zip(ops(m), full, strict=True):
            bad += rows_differing(a, b[:m])
    gpu_record("row kernels (rms, add_rms, silu_mul, rope, head_rms)", f"{bad} rows differ")
    assert bad == 0


@pytest.mark.parametrize("role", ["o", "down"])
def test_linear_add_rms_norm_fused_equals_op_by_op(cuda, role, gpu_record):
    """The split-K grid's ordered sum fused with the residual add and RMSNorm
    (`TritonOps.linear_add_rms_norm`) against the linear then `add_rms_norm`, at every M of
    the grid's rows and past them (op by op there too): output and residual bit for bit."""
    from samebits.kernels.placement import TorchPlacement
    from samebits.kernels.plan import KernelPlan, build_plan
    from samebits.kernels.triton.backend import TritonOps

    n, k = LLAMA3_8B[role]
    g = _gen(7)
    plan: KernelPlan = build_plan("invariant", head_dim=128, group=4, device="cuda")
    ops = TritonOps(plan)
    lin = ops.linear((torch.randn((n, k), device="cuda", generator=g) * 0.02).to(BF16), None,
                     role=role)  # fmt: skip
    w = torch.randn((n,), device="cuda", generator=g)
    x = torch.randn((300, k), device="cuda", generator=g).to(BF16)
    res = torch.randn((300, n), device="cuda", generator=g)
    fused_ms, bad = [], {}
    for m in (1, 7, 16, 17, 64, 65, 128, 129, 300):
        r1, r2 = res[:m].clone(), res[:m].clone()
        want, _ = TorchPlacement.linear_add_rms_norm(ops, lin, x[:m], r1, w, 1e-5)
        got, _ = ops.linear_add_rms_norm(lin, x[:m], r2, w, 1e-5)
        if lin.grid_partials(x[:m]) is not None:
            fused_ms.append(m)
        n_bad = rows_differing(got, want) + rows_differing(r2, r1)
        if n_bad:
            bad[m] = n_bad
    gpu_record(f"linear_add_rms_norm {role}", f"fused at M={fused_ms}; rows differing {bad}")
    assert bad == {} and fused_ms


def test_attention_spans_split_decode_equals_prefill(cuda, gpu_record):
    """The span definition on the H200 (span 512): prefill in chunks crossing span boundaries,
    a cached prefix ending mid-span, and split-KV decode (the chosen launch, and 1 .. 9
    programs per request forced) at span boundaries, alone and in a batch of 16."""
    from samebits.kernels.triton.attention import _split_decode, attention_metadata

    heads, kv_heads, dim, length, group = 32, 8, 128, 3000, 4
    g = _gen(12)
    q = torch.randn((length, heads, dim), device="cuda", generator=g).to(BF16)
    k, v = (torch.randn((length, kv_heads, dim), device="cuda", generator=g).to(BF16) for _ in "kv")
    nb = -(-length // 16) + 3
    table = np.random.default_rng(5).permutation(nb).astype(np.int64)
    layout = (_paged(k, table, 16, nb * 16), _paged(v, table, 16, nb * 16), table, 16)
    ref = _attend(q, layout, [(0, length)], group)
    checks = {}
    for chunk in (500, 511, 513, 1024):
        spans = [(a, min(length, a + chunk)) for a in range(0, length, chunk)]
        out = torch.cat([_attend(q, layout, [s], group) for s in spans])
        checks[f"chunk{chunk}"] = rows_differing(out, ref)
    checks["prefix hit at 1700"] = rows_differing(_attend(q, layout, [(1700, length)], group),
                                                  ref[1700:])  # fmt: skip
    points = (0, 511, 512, 513, 1023, 1024, 1535, 2047, 2048, 2999)
    for t in points:
        checks[f"decode {t}"] = rows_differing(
            _attend(q, layout, [(t, t + 1)], group), ref[t : t + 1]
        )
    batch = (0, 100, 511, 512, 700, 1024, 1500, 1536, 2000, 2047, 2048, 2500, 2900, 2998, 2999, 5)
    want = torch.cat([ref[t : t + 1] for t in batch])
    checks["decode batch of 16"] = rows_differing(
        _attend(q, layout, [(t, t + 1) for t in batch], group), want
    )
    kc, vc = layout[0], layout[1]
    qq = torch.cat([q[t : t + 1] for t in batch]).contiguous()
    meta = attention_metadata(np.array(batch), np.arange(17), np.repeat(table[None], 16, 0), 16,
                              group, "cuda")  # fmt: skip
    for splits in (1, 2, 3, 6, 9):
        out = torch.empty_like(qq)
        _split_decode(qq, kc, vc, meta, dim**-0.5, splits, out)
        checks[f"batch of 16, {splits} programs each"] = rows_differing(out, want)
    bad = {key: n for key, n in checks.items() if n}
    gpu_record("attention spans L=3000 span=512", f"{len(checks)} configs, rows differing {bad}")
    assert bad == {}
