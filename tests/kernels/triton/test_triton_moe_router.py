"""The router kernel (`kernels/triton/moe_router.py`) against the definition
`kernels.moe.route` (torch ops), bit for bit, on Triton's CPU interpreter: ids equal, weights
equal as int32 views, for expert counts that are and are not powers of two, top-k 1..8, with
and without renormalization, on rows with ties, -inf logits, logits below the exp floor and
huge spreads. The kernel's rows are independent of the batch (a row alone = the row inside a
batch)."""

from __future__ import annotations

import pytest
import torch

from moe_routing import router_logits
from samebits.kernels.moe import route as route_reference
from samebits.kernels.triton import moe_router


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.int32), b.view(torch.int32))


@pytest.mark.parametrize("experts,top_k", [(128, 8), (8, 2), (60, 4), (3, 3), (16, 1), (7, 6)])
@pytest.mark.parametrize("normalize", [True, False])
def test_router_kernel_equals_definition(experts, top_k, normalize):
    logits = router_logits(37, experts, seed=experts * 10 + top_k)
    ids, w = moe_router.route(logits, top_k, normalize)
    ref_ids, ref_w = route_reference(logits, top_k, normalize)
    assert ids.dtype == torch.int64 and torch.equal(ids, ref_ids)
    assert _bits_equal(w, ref_w)


def test_router_rows_independent_of_batch():
    logits = router_logits(19, 128, seed=3)
    ids, w = moe_router.route(logits, 8, True)
    for i in (0, 4, 18):
        one_ids, one_w = moe_router.route(logits[i : i + 1].clone(), 8, True)
        assert torch.equal(one_ids[0], ids[i]) and _bits_equal(one_w[0], w[i])


def test_router_kernel_differs_from_a_plain_softmax():
    """Not vacuous: torch.softmax's bits differ from the definition on some row."""
    logits = router_logits(64, 128, seed=5)
    _, w = moe_router.route(logits, 8, False)
    plain = torch.gather(torch.softmax(logits, dim=-1), 1, route_reference(logits, 8, False)[0])
    assert not _bits_equal(w, plain)


def test_router_bad_input():
    with pytest.raises(TypeError, match="float32"):
        moe_router.route(torch.zeros((2, 8), dtype=torch.float64), 2, True)
    with pytest.raises(ValueError, match="top_k"):
        moe_router.route(torch.zeros((2, 8)), 9, True)
    ids, w = moe_router.route(torch.zeros((0, 8)), 2, True)
    assert ids.shape == (0, 2) and w.shape == (0, 2)
