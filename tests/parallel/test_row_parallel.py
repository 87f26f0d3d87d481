"""The TP launch of a row-parallel layer equals the TP = 1 launch bit for bit (evidence class:
test). In process: rank r of t holds the weight's K block [r*K/t, (r+1)*K/t) as an sbgemm
linear of 8/t ranges and yields its partials; the gathered partials, summed in range order by
`RowParallelLinear`, must give the bits of the TP = 1 sbgemm linear of 8 ranges (the CPU split
plan of o / down), at row counts that take every code path (fused 1-8 rows, the 16-row tile,
scratch tiles) and with several threads."""

from __future__ import annotations

import pytest
import torch

from samebits.kernels.cpu import native
from samebits.kernels.cpu.plan import ROW_PARALLEL_SPLITS, linear_splits
from samebits.kernels.cpu.sbgemm import SbLinear
from samebits.parallel.linear import RowParallelLinear, VocabParallelLinear, ordered_sum

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the native C kernels")
ROWS = (1, 3, 8, 16, 17, 40)


class FakeGroup:
    """A group of `t` ranks in one process: rank `rank` is the caller; the other ranks'
    tensors come from `others(rank, t)` (what those ranks would contribute)."""

    def __init__(self, rank: int, t: int, others) -> None:
        self.rank, self.world_size, self.others = rank, t, others

    def all_gather(self, tensor: torch.Tensor) -> torch.Tensor:
        parts = [tensor if r == self.rank else self.others(r) for r in range(self.world_size)]
        return torch.stack(parts)


def _bits(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.int32).numpy().tobytes()


def _shard(weight: torch.Tensor, rank: int, t: int, threads: int) -> SbLinear:
    k = weight.shape[1] // t
    block = weight[:, rank * k : (rank + 1) * k].contiguous()
    return SbLinear(block, None, threads, None, ROW_PARALLEL_SPLITS // t)


def test_o_and_down_take_the_split_plan():
    assert ROW_PARALLEL_SPLITS == 8 and all(8 % t == 0 for t in (1, 2, 4, 8))
    assert linear_splits(4096, "o") == 8 and linear_splits(14336, "down") == 8
    assert linear_splits(4096, "qkv") == 1 and linear_splits(4096, "lm_head") == 1
    assert linear_splits(4100, "down") == 1  # 8 does not divide K: one chain
    assert linear_splits(576, "o") == 1  # 8 ranges of 72: not whole 32-k blocks


@pytest.mark.parametrize("t", [2, 4, 8])
@pytest.mark.parametrize("n,k", [(64, 256), (96, 512), (256, 1024)])
def test_row_parallel_equals_tp1(t, n, k):
    gen = torch.Generator().manual_seed(n + k + t)
    weight = torch.randn((n, k), generator=gen)
    x = torch.randn((max(ROWS), k), generator=gen)
    full = SbLinear(weight, None, 2, None, ROW_PARALLEL_SPLITS)
    shards = [_shard(weight, r, t, threads=1 + r % 2) for r in range(t)]
    kb = k // t
    for m in ROWS:
        xs = [x[:m, r * kb : (r + 1) * kb].contiguous() for r in range(t)]
        for rank in range(t):
            group = FakeGroup(rank, t, lambda r, m=m, xs=xs: shards[r].partials(xs[r]))
            layer = RowParallelLinear(shards[rank], group, (n, k), None, torch.float32)
            assert _bits(layer(xs[rank])) == _bits(full(x[:m])), f"t={t} rank={rank} M={m}"


def test_split_plan_differs_from_one_chain():
    """The split changes the CPU numerics (hence the plan's `linear_split` line): 8 ranges
    and one chain give other bits for some output of a long K."""
    gen = torch.Generator().manual_seed(1)
    weight, x = torch.randn((64, 2048), generator=gen), torch.randn((4, 2048), generator=gen)
    one, split = SbLinear(weight, None, 1), SbLinear(weight, None, 1, None, 8)
    assert _bits(one(x)) != _bits(split(x))
    parts = split.partials(x)
    assert _bits(ordered_sum(parts)) == _bits(split(x))


@pytest.mark.parametrize("t", [2, 4])
def test_vocab_parallel_equals_full_head(t):
    """Vocab blocks (the last zero-padded), gathered side by side: the full head's bits."""
    gen = torch.Generator().manual_seed(t)
    vocab, k = 321, 64
    head, x = torch.randn((vocab, k), generator=gen), torch.randn((5, k), generator=gen)
    rows = -(-vocab // t)
    blocks = []
    for r in range(t):
        block = torch.zeros((rows, k))
        part = head[r * rows : (r + 1) * rows]
        block[: part.shape[0]] = part
        blocks.append(SbLinear(block, None, 1))
    group = FakeGroup(0, t, lambda r: blocks[r](x))
    got = VocabParallelLinear(blocks[0], group, (vocab, k))(x)
    assert got.shape == (5, vocab)
    assert _bits(got) == _bits(SbLinear(head, None, 1)(x))


@pytest.mark.parametrize("kind", ["q4_1", "q8_0", "bf16"])
def test_split_keeps_the_stored_form(kind):
    """With 8 ranges of whole 32-k blocks sbgemm still reads the GGUF / 16-bit stored form
    (no float32 fallback: the decode speed), with the bits of the float32 weight's split, at
    every code path's row count."""
    import quantized_weights as qw

    gen = torch.Generator().manual_seed(7)
    source, weight = getattr(qw, f"random_{kind}")(64, 512, gen)
    stored = SbLinear(weight, None, 2, source, ROW_PARALLEL_SPLITS)
    assert stored.format == source.qtype
    plain = SbLinear(weight, None, 1, None, ROW_PARALLEL_SPLITS)
    x = torch.randn((max(ROWS), 512), generator=gen)
    for m in ROWS:
        assert _bits(stored(x[:m])) == _bits(plain(x[:m])), f"M={m}"
        assert _bits(stored.partials(x[:m])) == _bits(plain.partials(x[:m])), f"M={m}"


def test_the_plan_names_the_split():
    """The split is part of the CPU plan's numerics, so of its fingerprint."""
    from samebits.kernels.plan import build_plan

    plan = build_plan("invariant", num_threads=1)
    assert "8 fixed ranges" in plan.to_dict()["ops"]["linear_split"]
