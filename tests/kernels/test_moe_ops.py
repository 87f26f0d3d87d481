"""The MoE ops of the invariant op sets (`samebits.kernels.moe`): the portable exp, the
fixed-tree softmax, top-k with ties to the lower expert id, and the experts' combine, checked
bit for bit (bytes, never tolerances) for row invariance, for any spread of tokens over the
experts (one expert taking every token, experts taking none), and dense vs sparse expert runs;
plus their agreement with transformers' math (the fast plan's) within float32 rounding."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from samebits.bits import differing_rows, same_bits
from samebits.kernels import moe
from samebits.kernels.plan import build_plan
from samebits.kernels.registry import make_ops

HIDDEN, INTER, EXPERTS = 64, 32, 8


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Distance in float32 units in the last place (both non-negative)."""
    return np.abs(a.view(np.int32).astype(np.int64) - b.view(np.int32).astype(np.int64))


def test_portable_exp_is_accurate():
    x = torch.linspace(-80.0, 0.0, 200001, dtype=torch.float32)
    ours = moe.portable_exp(x).numpy()
    exact = np.exp(x.numpy().astype(np.float64)).astype(np.float32)
    assert _ulps(ours, exact).max() <= 1  # of the correctly rounded value
    assert moe.portable_exp(torch.tensor([0.0])).item() == 1.0


def test_portable_exp_floor_and_specials():
    x = torch.tensor([-80.5, -1000.0, float("-inf"), float("nan"), -0.0])
    out = moe.portable_exp(x)
    assert out[:3].tolist() == [0.0, 0.0, 0.0] and not torch.signbit(out[:3]).any()
    assert torch.isnan(out[3]) and out[4].item() == 1.0


def test_portable_exp_bits_do_not_depend_on_the_tensor():
    """Every element's bits are a function of its value alone: slices of any length and offset
    (vector bodies and tails of the elementwise loops) give the full tensor's bits."""
    x = -torch.rand(4099, generator=_gen(1)) * 60
    full = moe.portable_exp(x)
    for lo, n in [(0, 1), (1, 1), (3, 7), (5, 17), (100, 1000), (4090, 9)]:
        assert same_bits(moe.portable_exp(x[lo : lo + n].clone()), full[lo : lo + n])


@pytest.mark.parametrize("width", [1, 3, 6, 8, 128])
def test_fixed_tree_sum_is_the_stated_tree(width):
    p = torch.rand((5, width), generator=_gen(width))
    cols = [p[:, j].numpy() for j in range(width)]
    size = 1 << max(0, (width - 1).bit_length())
    cols += [np.zeros(5, np.float32)] * (size - width)
    while len(cols) > 1:  # s[j] = s[j] + s[j + half], in float32
        half = len(cols) // 2
        cols = [(cols[j] + cols[j + half]).astype(np.float32) for j in range(half)]
    assert same_bits(moe.fixed_tree_sum(p)[:, 0].numpy(), cols[0])


def test_top_k_breaks_ties_toward_the_lower_id():
    values = torch.tensor([[1.0, 3.0, 3.0, 2.0, 3.0], [0.0, 0.0, 0.0, 0.0, 0.0],
                           [-0.0, 0.0, 5.0, -1.0, 5.0]])  # fmt: skip
    assert moe.top_k_lowest_id(values, 3).tolist() == [[1, 2, 4], [0, 1, 2], [2, 4, 0]]


def test_top_k_matches_a_stable_sort_with_many_ties():
    values = torch.randint(0, 4, (300, EXPERTS), generator=_gen(2)).float()
    ids = moe.top_k_lowest_id(values, 3)
    for row, got in zip(values.tolist(), ids.tolist(), strict=True):
        expected = sorted(range(EXPERTS), key=lambda e: (-row[e], e))[:3]
        assert got == expected


@pytest.mark.parametrize("normalize", [True, False])
def test_route_is_row_local(normalize):
    logits = torch.randn((97, EXPERTS), generator=_gen(3)) * 2
    ids, weights = moe.route(logits, 3, normalize)
    for i in range(logits.shape[0]):
        one_ids, one_w = moe.route(logits[i : i + 1].clone(), 3, normalize)
        assert same_bits(one_ids[0], ids[i]) and same_bits(one_w[0], weights[i])


@pytest.mark.parametrize("normalize", [True, False])
def test_route_agrees_with_transformers_math(normalize):
    logits = torch.randn((200, EXPERTS), generator=_gen(4)) * 2
    ids, weights = moe.route(logits, 3, normalize)
    probs = torch.softmax(logits.double(), dim=-1)
    ref_w, ref_ids = torch.topk(probs, 3, dim=-1)
    if normalize:
        ref_w = ref_w / ref_w.sum(dim=-1, keepdim=True)
    assert torch.equal(ids, ref_ids)  # random logits: no ties
    assert (weights.double() - ref_w).abs().max() < 1e-6


def test_route_rejects_low_precision_logits():
    with pytest.raises(TypeError, match="float32"):
        moe.route(torch.zeros((2, 4), dtype=torch.bfloat16), 2, True)


# ------------------------------------------------------------------ experts and combine
@pytest.fixture(scope="module")
def ops():
    return make_ops(build_plan("invariant", num_threads=1))


@pytest.fixture(scope="module")
def experts(ops):
    gen = _gen(5)
    out = []
    for _ in range(EXPERTS):
        gate_up = torch.randn((2 * INTER, HIDDEN), generator=gen) / HIDDEN**0.5
        down = torch.randn((HIDDEN, INTER), generator=gen) / INTER**0.5
        out.append((ops.linear(gate_up, None, role="gate_up"), ops.linear(down, None, role="down")))
    return out


def _x(n: int, seed: int = 6) -> torch.Tensor:
    return torch.randn((n, HIDDEN), generator=_gen(seed))


def _routing(n: int, seed: int = 7) -> tuple[torch.Tensor, torch.Tensor]:
    return moe.route(torch.randn((n, EXPERTS), generator=_gen(seed)), 3, True)


def test_experts_rows_are_batch_invariant(ops, experts):
    x, (ids, w) = _x(40), _routing(40)
    batched = ops.moe_experts(x, ids, w, experts)
    for i in range(40):
        one = ops.moe_experts(x[i : i + 1].clone(), ids[i : i + 1], w[i : i + 1], experts)
        assert same_bits(one[0], batched[i]), i


def test_one_expert_takes_every_token_and_others_none(ops, experts):
    """Expert 5 gets every token (rank 0) and experts 0, 1, 2 get none: each row is still the
    row computed alone, where expert 5 runs on one token."""
    n = 24
    x = _x(n, 8)
    pairs = [(3, 4), (6, 7), (4, 6), (7, 3), (6, 3)]
    ids = torch.tensor([(5, *pairs[t % len(pairs)]) for t in range(n)])
    w = torch.softmax(torch.randn((n, 3), generator=_gen(10)), dim=-1)
    counts = torch.bincount(ids.reshape(-1), minlength=EXPERTS)
    assert counts[5] == n and counts[:3].tolist() == [0, 0, 0]
    batched = ops.moe_experts(x, ids, w, experts)
    alone = torch.cat([ops.moe_experts(x[i : i + 1].clone(), ids[i : i + 1], w[i : i + 1],
                                       experts) for i in range(n)])  # fmt: skip
    assert differing_rows(batched, alone) == []


def test_dense_and_sparse_expert_runs_give_the_same_bits(ops, experts):
    """The dense path (every expert on every row, what a CUDA graph captures) and the sparse
    path (rows gathered per expert) differ only in how many rows each linear sees."""
    x, (ids, _) = _x(33, 11), _routing(33, 12)
    sparse = moe.expert_outputs(x, ids, experts, ops.silu_mul)
    dense = moe.expert_outputs(x, ids, experts, ops.silu_mul, dense=True)
    assert same_bits(sparse, dense)


def test_combine_adds_in_rank_order_in_float32(ops, experts):
    x, (ids, w) = _x(9, 13), _routing(9, 14)
    outputs = moe.expert_outputs(x, ids, experts, ops.silu_mul)
    o, ww = outputs.numpy(), w.numpy()
    expected = (o[:, 0] * ww[:, :1]).astype(np.float32)
    for r in (1, 2):
        expected = (expected + (o[:, r] * ww[:, r : r + 1]).astype(np.float32)).astype(np.float32)
    assert same_bits(ops.moe_experts(x, ids, w, experts).numpy(), expected)
    for r in range(3):  # row (t, r) is expert ids[t, r] on x[t]
        gate_up, down = experts[int(ids[4, r])]
        assert same_bits(outputs[4, r], down(ops.silu_mul(gate_up(x[4:5].clone())))[0])


def test_empty_batch(ops, experts):
    ids, w = moe.route(torch.zeros((0, EXPERTS)), 3, True)
    assert ids.shape == (0, 3) and w.shape == (0, 3)
    assert ops.moe_experts(torch.zeros((0, HIDDEN)), ids, w, experts).shape == (0, HIDDEN)


def test_fast_moe_agrees_within_rounding(ops, experts):
    fast = make_ops(build_plan("fast", num_threads=1))
    logits = torch.randn((30, EXPERTS), generator=_gen(15))
    x = _x(30, 16)
    ids, w = ops.moe_route(logits, 3, True)
    fast_ids, fast_w = fast.moe_route(logits, 3, True)
    assert torch.equal(ids, fast_ids) and (w - fast_w).abs().max() < 1e-6
    ours = ops.moe_experts(x, ids, w, experts)
    theirs = fast.moe_experts(x, fast_ids, fast_w, experts)
    assert (ours - theirs).abs().max() <= 1e-5 * ours.abs().max()
