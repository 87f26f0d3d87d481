"""Paged attention: a query row's bits are independent of chunking, batching, tile height,
GQA packing, page size and physical page placement (CPU interpreter, fp32)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import torch
from triton_bits import differing_rows, same_bits

from samebits.kernels.triton.attention import attention_metadata, paged_attention
from samebits.kernels.triton.attention_meta import _programs

D, HKV = 32, 2
SCALE = D**-0.5


@dataclass
class Request:
    """One request's queries and keys/values for positions 0..len-1."""

    q: torch.Tensor  # [L, H, D]
    k: torch.Tensor  # [L, HKV, D]
    v: torch.Tensor


@dataclass
class Cache:
    """A paged KV cache holding several requests; ``tables[r]`` maps logical -> physical."""

    k: torch.Tensor
    v: torch.Tensor
    tables: np.ndarray
    block_size: int


def make_request(length: int, group: int, seed: int) -> Request:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn((length, HKV * group, D), generator=g) * 2.0
    return Request(
        q, torch.randn((length, HKV, D), generator=g), torch.randn((length, HKV, D), generator=g)
    )


def make_cache(reqs: list[Request], block_size: int, seed: int) -> Cache:
    """Blocks of all requests scattered over a pool in a seeded random order; -1 pads tables."""
    need = [-(-r.k.shape[0] // block_size) for r in reqs]
    physical = np.random.default_rng(seed).permutation(sum(need) + 3)
    tables = np.full((len(reqs), max(need) + 2), -1, dtype=np.int32)
    k = torch.full(((sum(need) + 3) * block_size, HKV, D), float("nan"))
    v = k.clone()
    start = 0
    for r, (req, n) in enumerate(zip(reqs, need, strict=True)):
        tables[r, :n] = physical[start : start + n]
        start += n
        pos = np.arange(req.k.shape[0])
        slots = torch.from_numpy(tables[r, pos // block_size] * block_size + pos % block_size)
        k[slots], v[slots] = req.k, req.v
    return Cache(k, v, tables, block_size)


def run(reqs, cache, chunks, block_m=None) -> list[torch.Tensor]:
    """One step: ``chunks`` = [(request index, first pos, end pos)]; outputs per chunk."""
    q = torch.cat([reqs[r].q[a:b] for r, a, b in chunks]).contiguous()
    positions = np.concatenate([np.arange(a, b) for _, a, b in chunks])
    qsl = np.cumsum([0] + [b - a for _, a, b in chunks])
    tables = cache.tables[[r for r, _, _ in chunks]]
    group = q.shape[1] // HKV
    meta = attention_metadata(positions, qsl, tables, cache.block_size, group, "cpu", block_m)
    out = paged_attention(q, cache.k, cache.v, meta, SCALE)
    return [out[qsl[i] : qsl[i + 1]] for i in range(len(chunks))]


def chunked(reqs, cache, r: int, chunk: int, block_m=None) -> torch.Tensor:
    n = reqs[r].q.shape[0]
    return torch.cat(
        [run(reqs, cache, [(r, a, min(n, a + chunk))], block_m)[0] for a in range(0, n, chunk)]
    )


def assert_same(out: torch.Tensor, ref: torch.Tensor, what: str) -> None:
    assert same_bits(out, ref), f"{what}: rows {differing_rows(out, ref)}"


@pytest.mark.parametrize("group", [1, 2, 3, 4])
def test_prefill_chunked_and_decode_agree(group):
    reqs = [make_request(75, group, seed=group)]
    cache = make_cache(reqs, 16, seed=0)
    whole = run(reqs, cache, [(0, 0, 75)])[0]
    for chunk in (1, 7, 33):
        assert_same(chunked(reqs, cache, 0, chunk), whole, f"group {group} chunk {chunk}")


def test_mixed_batch_matches_solo():
    reqs = [make_request(n, 4, seed=10 + i) for i, n in enumerate((90, 70, 40))]
    cache = make_cache(reqs, 16, seed=1)
    solo = [run(reqs, cache, [(r, 0, len(req.q))])[0] for r, req in enumerate(reqs)]
    step = [(1, 69, 70), (0, 41, 77), (2, 0, 40), (0, 89, 90)]  # decode, chunk, prefill, decode
    for (r, a, b), out in zip(step, run(reqs, cache, step), strict=True):
        assert_same(out, solo[r][a:b], f"request {r} rows {a}:{b}")


def test_physical_block_placement_irrelevant():
    reqs = [make_request(83, 2, seed=20), make_request(30, 2, seed=21)]
    a = run(reqs, make_cache(reqs, 16, seed=2), [(0, 0, 83), (1, 0, 30)])
    b = run(reqs, make_cache(reqs, 16, seed=3), [(1, 0, 30), (0, 0, 83)])
    assert_same(a[0], b[1], "request 0")
    assert_same(a[1], b[0], "request 1")


def test_block_size_irrelevant():
    reqs = [make_request(83, 2, seed=30)]
    ref = run(reqs, make_cache(reqs, 16, seed=4), [(0, 0, 83)])[0]
    for block_size in (8, 32, 64):
        out = run(reqs, make_cache(reqs, block_size, seed=5), [(0, 0, 83)])[0]
        assert_same(out, ref, f"block_size {block_size}")


@pytest.mark.parametrize("group", [1, 3, 4])
def test_tile_height_and_packing_irrelevant(group):
    """block_m changes tokens per tile (block_m // group) and so the row -> (token, head) map."""
    reqs = [make_request(70, group, seed=40 + group)]
    cache = make_cache(reqs, 16, seed=6)
    ref = run(reqs, cache, [(0, 0, 70)], block_m=16)[0]
    for block_m in (32, 64, 128):
        assert_same(run(reqs, cache, [(0, 0, 70)], block_m)[0], ref, f"block_m {block_m}")
    assert_same(chunked(reqs, cache, 0, 9, block_m=32), ref, "chunk 9 block_m 32")


def _reference(req: Request) -> torch.Tensor:
    group = req.q.shape[1] // HKV
    q = req.q.double()
    k = req.k.double().repeat_interleave(group, dim=1)
    v = req.v.double().repeat_interleave(group, dim=1)
    s = torch.einsum("thd,shd->hts", q, k) * SCALE
    n = q.shape[0]
    s = s.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("hts,shd->thd", s.softmax(-1), v)


@pytest.mark.parametrize("group", [1, 2, 3, 4])
def test_accuracy_against_float64(group):
    reqs = [make_request(100, group, seed=50 + group)]
    out = run(reqs, make_cache(reqs, 16, seed=7), [(0, 0, 100)])[0]
    assert (out.double() - _reference(reqs[0])).abs().max() < _tolerance(reqs[0].v)


def _tolerance(v: torch.Tensor) -> float:
    """What ex2q's relative error on each weight (`replay.ex2q.MAX_REL_ERROR`) can move a
    weighted mean of v (the weights' numerator and denominator: twice), plus fp32's 2e-5."""
    from samebits.kernels.replay.ex2q import MAX_REL_ERROR

    return 2 * MAX_REL_ERROR * float(v.abs().max()) + 2e-5


def test_program_layout():
    req, row0 = _programs(np.array([0, 5, 6, 20]), tokens_per_tile=4)
    assert req.tolist() == [0, 0, 1, 2, 2, 2, 2]
    assert row0.tolist() == [0, 4, 5, 6, 10, 14, 18]


def test_default_tile_heights():
    tables = np.zeros((2, 4), dtype=np.int32)
    decode = attention_metadata(np.array([5, 9]), np.array([0, 1, 2]), tables, 16, 4, "cpu")
    prefill = attention_metadata(np.arange(3), np.array([0, 2, 3]), tables, 16, 4, "cpu")
    assert (decode.block_m, decode.num_programs) == (16, 2)
    assert (prefill.block_m, prefill.num_programs) == (64, 2)
    with pytest.raises(ValueError, match="block_m"):
        attention_metadata(np.arange(3), np.array([0, 3]), tables[:1], 16, 4, "cpu", block_m=24)


def test_register_cap_only_on_decode_tiles_of_small_heads(monkeypatch):
    """The cap is a static launch fact: decode tiles (16 rows) with head dim <= 128 only; the
    prefill tile (64 rows) would spill under it. The benchmarks' override wins when set."""
    from samebits.kernels.triton import attention

    assert attention.register_cap(16, 128) == attention.DECODE_MAXNREG == 128
    assert attention.register_cap(16, 64) == 128
    assert attention.register_cap(64, 128) is None
    assert attention.register_cap(16, 256) is None
    assert attention.register_cap(32, 128) is None  # a GQA group of 32 heads: no cap
    monkeypatch.setattr(attention, "ATTENTION_MAXNREG", 96)
    assert attention.register_cap(64, 128) == 96


def test_sequential_launch_stages_follow_the_tile_height_only(monkeypatch):
    """128-row tiles run 2 pipeline stages, others the compiler's default; an experiment's
    ATTENTION_STAGES wins (a launch choice: the numerics id does not name it)."""
    from samebits.kernels.triton import attention

    assert attention.sequential_options(128, 128)["num_stages"] == 2
    assert "num_stages" not in attention.sequential_options(64, 128)
    assert attention.sequential_options(16, 128) == {"maxnreg": attention.DECODE_MAXNREG}
    few, warps = attention.SPLIT_FEW_PROGRAMS, attention.SPLIT_WARPS
    assert attention.split_options(few) == {"num_warps": warps,
                                            "num_stages": attention.SPLIT_STAGES}  # fmt: skip
    assert attention.split_options(few + 1) == {"num_warps": warps}
    monkeypatch.setattr(attention, "ATTENTION_STAGES", 4)
    assert attention.sequential_options(128, 128)["num_stages"] == 4
    assert attention.split_options(1)["num_stages"] == 4
    monkeypatch.setattr(attention, "ATTENTION_MAXNREG", 96)
    assert attention.split_options(few + 1)["maxnreg"] == 96
