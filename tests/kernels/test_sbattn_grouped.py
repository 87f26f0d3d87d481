"""sbattn's grouped kernels (all query heads of a KV head in registers, each key and value row
read once) against the one-head-at-a-time kernel: bit for bit, for every grouped shape, over
prompts that span several key tiles, decode rows, pages out of order, and special values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from samebits.kernels.cpu import native, sbattn

pytestmark = pytest.mark.skipif(not native.available(), reason="no C compiler here")


def _attend(q, kc, vc, pos, req, tables, block, tile) -> bytes:
    out = torch.empty_like(q)
    sbattn.paged_attention(q, kc, vc, pos, req, tables, block, tile, 0.125, out, 2, span=64)
    return out.numpy().tobytes()


@pytest.mark.parametrize("dim,group", [(64, 2), (64, 3), (64, 4), (128, 2), (64, 1), (32, 3)])
def test_grouped_heads_equal_one_head_at_a_time(dim, group):
    rng = np.random.default_rng(dim + group)
    n_kv, block, tile = 2, 16, 32
    slots = 40 * block
    kc = torch.from_numpy(rng.standard_normal((slots, n_kv, dim)).astype(np.float32) * 3)
    vc = torch.from_numpy(rng.standard_normal((slots, n_kv, dim)).astype(np.float32))
    kc[5, 0, :4] = torch.tensor([float("inf"), -0.0, 1e-40, -1e30])
    tables = np.stack([rng.permutation(40)[:20], rng.permutation(40)[:20]]).astype(np.int64)
    pos = np.array([0, 1, 31, 32, 33, 100, 200, 250, 7, 64], dtype=np.int64)
    req = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 0], dtype=np.int64)
    q = torch.from_numpy(rng.standard_normal((len(pos), n_kv * group, dim)).astype(np.float32))
    lib = native.library()
    try:
        lib.sb_attention_set_grouped(0)
        alone = _attend(q, kc, vc, pos, req, tables, block, tile)
        lib.sb_attention_set_grouped(1)
        grouped = _attend(q, kc, vc, pos, req, tables, block, tile)
    finally:
        lib.sb_attention_set_grouped(1)
    assert grouped == alone
