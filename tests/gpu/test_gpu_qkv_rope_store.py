"""The fused attention input (`TritonOps.qkv_rope_store`, one kernel per layer) on the GPU in
bfloat16 with Llama-3-8B head shapes: the same bits as the op-by-op default it replaces
(split, contiguous copies, `rows.rope` of q and of k, `index_copy_` into the caches) for q and
for the whole K and V caches, and each token's bits equal to the token computed alone.
Comparisons are integer views."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

pytestmark = pytest.mark.gpu
BF16 = torch.bfloat16
HEADS, KV_HEADS, D = 32, 8, 128  # Llama-3-8B
SLOTS, POSITIONS = 8192, 8192


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int16 if t.element_size() == 2 else torch.int32)


def rows_differing(a: torch.Tensor, b: torch.Tensor) -> int:
    assert a.shape == b.shape and a.dtype == b.dtype
    return int((bits(a) != bits(b)).reshape(a.shape[0], -1).any(1).sum())


def _inputs(n: int):
    """qkv, RoPE tables of Llama 3 (theta 500000, llama3 scaling), a random cache, a batch of
    n tokens at random positions with shuffled distinct slots."""
    from samebits.kernels.interface import KVCache
    from samebits.model.presets import PRESETS
    from samebits.model.rope_tables import rope_tables

    cfg = PRESETS["llama-3-8b"]
    g = torch.Generator(device="cuda").manual_seed(n)
    qkv = (torch.randn((n, (HEADS + 2 * KV_HEADS) * D), device="cuda", generator=g) * 3).to(BF16)
    cos, sin = rope_tables(D, cfg.rope_theta, cfg.rope_scaling, POSITIONS)
    cos, sin = cos.float().cuda().contiguous(), sin.float().cuda().contiguous()
    kv = KVCache([torch.randn((SLOTS, KV_HEADS, D), device="cuda", generator=g).to(BF16)],
                 [torch.randn((SLOTS, KV_HEADS, D), device="cuda", generator=g).to(BF16)])  # fmt: skip
    pos = torch.randint(0, POSITIONS, (n,), device="cuda", generator=g)
    slots = torch.randperm(SLOTS, device="cuda", generator=g)[:n]
    return qkv, cos, sin, kv, pos, slots


def _batch(pos: torch.Tensor, slots: torch.Tensor) -> SimpleNamespace:
    """What the op reads of a FlatBatch: device positions and the slot mapping."""
    return SimpleNamespace(slot_mapping=slots, device_positions=lambda: pos)


def _run(fn, ops, qkv, cos, sin, kv, pos, slots):
    from samebits.kernels.interface import KVCache

    kv = KVCache([t.clone() for t in kv.k], [t.clone() for t in kv.v])
    q = fn(ops, qkv.clone(), _batch(pos, slots), cos, sin, kv, 0, HEADS, KV_HEADS, D)
    torch.cuda.synchronize()
    return q, kv


@pytest.mark.parametrize("n", [1, 64, 257])
def test_qkv_rope_store_same_bits_as_op_by_op(cuda, n, gpu_record):
    from samebits.kernels.placement import TorchPlacement
    from samebits.kernels.triton.backend import TritonOps

    ops = TritonOps(
        SimpleNamespace(dtype="bfloat16", group=HEADS // KV_HEADS, attention_span=512, op_by_op=())
    )
    inputs = _inputs(n)
    rq, rkv = _run(TorchPlacement.qkv_rope_store, ops, *inputs)
    fq, fkv = _run(TritonOps.qkv_rope_store, ops, *inputs)
    assert fq.is_contiguous() and fq.shape == (n, HEADS, D)
    bad = {"q": rows_differing(fq, rq), "k_slots": rows_differing(fkv.k[0], rkv.k[0]),
           "v_slots": rows_differing(fkv.v[0], rkv.v[0])}  # fmt: skip
    written = inputs[-1]
    moved = rows_differing(fkv.k[0][written], inputs[3].k[0][written])
    gpu_record(f"qkv_rope_store n={n} (32/8 heads, D 128) vs op by op", bad)
    assert bad == {"q": 0, "k_slots": 0, "v_slots": 0}
    assert moved == n  # every token's K slot was written


def test_qkv_rope_store_token_alone_same_bits(cuda, gpu_record):
    """Each sampled token of a 257-token launch has the bits of its launch alone (M = 1)."""
    from samebits.kernels.triton import rows

    qkv, cos, sin, kv, pos, slots = _inputs(257)

    def launch(lo: int, hi: int):
        k, v = kv.k[0].clone(), kv.v[0].clone()
        q = rows.qkv_rope_store(qkv[lo:hi].contiguous(), pos[lo:hi].contiguous(),
                                slots[lo:hi].contiguous(), cos, sin, k, v, HEADS)  # fmt: skip
        return q, k, v

    fq, fk, fv = launch(0, 257)
    bad = 0
    for t in (0, 1, 63, 64, 200, 256):
        q, k, v = launch(t, t + 1)
        s = slots[t : t + 1]
        bad += rows_differing(q, fq[t : t + 1])
        bad += rows_differing(k[s], fk[s]) + rows_differing(v[s], fv[s])
    gpu_record("qkv_rope_store token alone vs in 257", f"{bad} rows differ")
    assert bad == 0
