"""The fused attention input (`TritonOps.qkv_rope_store`: one kernel) against the op-by-op
default it replaces (`TorchPlacement.qkv_rope_store`: split, contiguous copies, `rows.rope`
of q and of k, `index_copy_` into the caches), bit for bit through integer views: q, and the
whole K and V caches (slots no token writes included), on the Triton interpreter. Negative
controls: a RoPE rounded once (as an FMA contraction would) and a swapped slot are caught.
And the decoder (a Llama: no q/k norms, so it takes the fused op) gives the same logits and
KV cache bits with the fused op as with the default."""

from __future__ import annotations

import importlib.util
import types
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_triton_engine import InterpreterTritonOps, _interpreter_plan, register_interpreter_ops
from triton_bits import differing_rows, same_bits

from samebits.engine.runner import build_flat_batch
from samebits.engine.scheduler import ScheduledRequest
from samebits.kernels.interface import KVCache
from samebits.kernels.metadata import FlatBatch
from samebits.kernels.placement import TorchPlacement
from samebits.kernels.triton import _row_kernels, rows
from samebits.kernels.triton.backend import TritonOps
from samebits.model import load_model
from samebits.model.llama import DecoderModel

SLOTS = 64  # cache rows; tokens write a shuffled subset
POSITIONS = 301  # RoPE table rows (odd)


class CpuTritonOps(TritonOps):
    """TritonOps with its tensors on the CPU (the interpreter's), in ``dtype``."""

    def __init__(self, dtype: torch.dtype):
        super().__init__(SimpleNamespace(dtype="float32", group=1, attention_span=512, op_by_op=()))
        self.device = torch.device("cpu")
        self.act_dtype = dtype


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _batch(n: int, seed: int) -> FlatBatch:
    """n tokens at odd positions, each with its own slot (a shuffled subset of the cache)."""
    g = _gen(seed)
    pos = torch.randint(0, POSITIONS // 2, (n,), generator=g) * 2 + 1
    slots = torch.randperm(SLOTS, generator=g)[:n]
    zeros = np.zeros(n, dtype=np.int64)
    return FlatBatch(
        input_ids=torch.zeros(n, dtype=torch.int64), positions=pos.numpy(), query_req=zeros,
        query_start_loc=np.array([0, n]), seq_lens=np.array([n]), slot_mapping=slots,
        block_tables=np.zeros((1, 1), dtype=np.int64), block_size=16,
        logits_indices=torch.zeros(0, dtype=torch.int64), position_ids=pos,
    )  # fmt: skip


def _case(n, heads, kv_heads, d, dtype, seed=0):
    """(qkv, cos, sin, kv): random activations and a cache full of random values."""
    g = _gen(100 + seed)
    qkv = (torch.randn((n, (heads + 2 * kv_heads) * d), generator=g) * 3).to(dtype)
    angles = torch.rand((POSITIONS, d // 2), generator=g) * 100
    cos, sin = torch.cos(angles), torch.sin(angles)
    kv = KVCache([torch.randn((SLOTS, kv_heads, d), generator=g).to(dtype)],
                 [torch.randn((SLOTS, kv_heads, d), generator=g).to(dtype)])  # fmt: skip
    return qkv, cos, sin, kv


def _copy(kv: KVCache) -> KVCache:
    return KVCache([t.clone() for t in kv.k], [t.clone() for t in kv.v])


def _both(n, heads, kv_heads, d, dtype, seed=0, fused_batch=None):
    """(q, kv) of the op-by-op reference and of the fused op on the same inputs."""
    ops = CpuTritonOps(dtype)
    qkv, cos, sin, kv = _case(n, heads, kv_heads, d, dtype, seed)
    batch = _batch(n, seed)
    ref_kv, fused_kv = _copy(kv), _copy(kv)
    args = (cos, sin)
    shape = (heads, kv_heads, d)
    ref_q = TorchPlacement.qkv_rope_store(ops, qkv.clone(), batch, *args, ref_kv, 0, *shape)
    fb = fused_batch(batch) if fused_batch else batch
    fused_q = ops.qkv_rope_store(qkv.clone(), fb, *args, fused_kv, 0, *shape)
    return (ref_q, ref_kv), (fused_q, fused_kv), kv


def _assert_same(ref, fused) -> None:
    (rq, rkv), (fq, fkv) = ref, fused
    assert fq.is_contiguous() and same_bits(fq, rq), f"q rows {differing_rows(fq, rq)}"
    assert same_bits(fkv.k[0], rkv.k[0]), f"K slots {differing_rows(fkv.k[0], rkv.k[0])}"
    assert same_bits(fkv.v[0], rkv.v[0]), f"V slots {differing_rows(fkv.v[0], rkv.v[0])}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("n", [1, 3, 17])
def test_fused_matches_op_by_op(n, d, dtype):
    ref, fused, before = _both(n, 8, 2, d, dtype, seed=n + d)
    _assert_same(ref, fused)
    written = _batch(n, n + d).slot_mapping
    untouched = torch.ones(SLOTS, dtype=torch.bool)
    untouched[written] = False
    assert same_bits(fused[1].k[0][untouched], before.k[0][untouched])
    assert not same_bits(fused[1].k[0][written], before.k[0][written])  # it did write


def test_rope_is_applied():
    """Not a copy: q differs from the raw q heads, and matches float64 RoPE closely."""
    (q, _), _, _ = _both(3, 8, 2, 64, torch.float32)
    qkv, cos, sin, _ = _case(3, 8, 2, 64, torch.float32)
    pos = _batch(3, 0).position_ids
    raw = qkv[:, : 8 * 64].reshape(3, 8, 64).double()
    a, b = raw[..., :32], raw[..., 32:]
    c, s = cos.double()[pos][:, None], sin.double()[pos][:, None]
    ref = torch.cat([a * c - b * s, b * c + a * s], dim=-1)
    assert not torch.equal(q.double(), raw)
    assert torch.allclose(q.double(), ref, rtol=1e-5, atol=1e-5)


def test_no_tokens_launches_nothing():
    ops = CpuTritonOps(torch.float32)
    qkv, cos, sin, kv = _case(0, 8, 2, 64, torch.float32)
    before = _copy(kv)
    q = ops.qkv_rope_store(qkv, _batch(0, 0), cos, sin, kv, 0, 8, 2, 64)
    assert q.shape == (0, 8, 64)
    assert same_bits(kv.k[0], before.k[0]) and same_bits(kv.v[0], before.v[0])


def test_rejects_mismatched_shapes():
    qkv, cos, sin, kv = _case(3, 8, 2, 64, torch.float32)
    pos, slots = _batch(3, 0).position_ids, _batch(3, 0).slot_mapping
    with pytest.raises(ValueError, match="heads"):
        rows.qkv_rope_store(qkv, pos, slots, cos, sin, kv.k[0], kv.v[0], heads=4)
    with pytest.raises(ValueError, match="int64"):
        rows.qkv_rope_store(qkv, pos, slots.int(), cos, sin, kv.k[0], kv.v[0], heads=8)


PROMPTS = {"a": ([7, 1, 99, 4, 250], [2]), "b": ([11, 12, 13], [1])}  # ids, block table


def _steps(model: DecoderModel, kv: KVCache) -> list[torch.Tensor]:
    """Logits of a prefill step (two requests, 5 and 3 tokens), then of a decode step."""
    prefill = [ScheduledRequest(f"r{i}", tuple(ids), 0, tuple(table), sample=True)
               for i, (ids, table) in enumerate(PROMPTS.values())]  # fmt: skip
    decode = [ScheduledRequest(f"r{i}", (ids[0],), len(ids), tuple(table), sample=True)
              for i, (ids, table) in enumerate(PROMPTS.values())]  # fmt: skip
    return [model.forward(build_flat_batch(sched, 16), kv) for sched in (prefill, decode)]


def test_decoder_fused_equals_op_by_op(tiny_llama_dir, monkeypatch):
    register_interpreter_ops(monkeypatch)
    loaded = load_model(tiny_llama_dir)
    cfg = loaded.config
    model = DecoderModel(cfg, loaded.weights, _interpreter_plan(head_dim=cfg.head_dim, group=2), 64)
    assert model.layers[0].q_norm is None and isinstance(model.ops, InterpreterTritonOps)
    launches = []
    kernel = rows.qkv_rope_store
    monkeypatch.setattr(rows, "qkv_rope_store", lambda *a: launches.append(1) or kernel(*a))
    fused_kv = model.new_kv_cache(4 * 16)
    fused = _steps(model, fused_kv)
    assert len(launches) == 2 * cfg.num_hidden_layers  # one per layer and step
    model.ops.qkv_rope_store = types.MethodType(TorchPlacement.qkv_rope_store, model.ops)
    ref_kv = model.new_kv_cache(4 * 16)
    ref = _steps(model, ref_kv)
    assert len(launches) == 2 * cfg.num_hidden_layers
    for a, b in zip(fused, ref, strict=True):
        assert same_bits(a, b)
    for layer in range(cfg.num_hidden_layers):
        assert same_bits(fused_kv.k[layer], ref_kv.k[layer]), layer
        assert same_bits(fused_kv.v[layer], ref_kv.v[layer]), layer
    assert bool(fused_kv.k[0][32:38].ne(0).any()) and bool(fused_kv.v[1][16:20].ne(0).any())


# --- negative controls: the comparison above sees a planted change -------------------------


def _mutant_kernels(tmp_path: Path, old: str, new: str):
    """A copy of `_row_kernels.py` with one planted change, imported under the interpreter."""
    text = Path(_row_kernels.__file__).read_text()
    assert text.count(old) == 1
    path = tmp_path / "mutant_row_kernels.py"
    path.write_text(text.replace(old, new))
    spec = importlib.util.spec_from_file_location("mutant_row_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_negative_control_single_rounding_rope_is_caught(tmp_path, monkeypatch):
    """The rotation rounded once (exact products, as an FMA contraction computes them)
    instead of per product: close to the reference, but not its bits."""
    mutant = _mutant_kernels(
        tmp_path,
        "(a * c - b * s).to(dst.dtype.element_ty)",
        "(a.to(tl.float64) * c - b.to(tl.float64) * s).to(dst.dtype.element_ty)",
    )
    monkeypatch.setattr(rows, "qkv_rope_store_kernel", mutant.qkv_rope_store_kernel)
    ref, fused, _ = _both(17, 8, 2, 64, torch.float32, seed=5)
    assert torch.allclose(fused[0], ref[0], rtol=1e-5, atol=1e-5)
    assert not same_bits(fused[0], ref[0])  # q
    assert not same_bits(fused[1].k[0], ref[1].k[0])  # K cache
    assert same_bits(fused[1].v[0], ref[1].v[0])  # V is copied, untouched by the mutant


def test_negative_control_swapped_slot_is_caught():
    def swap_two(batch: FlatBatch) -> FlatBatch:
        slots = batch.slot_mapping.clone()
        slots[[0, 1]] = slots[[1, 0]]
        return FlatBatch(**{**batch.__dict__, "slot_mapping": slots})

    ref, fused, _ = _both(3, 8, 2, 64, torch.bfloat16, seed=7, fused_batch=swap_two)
    assert same_bits(fused[0], ref[0])  # q does not depend on slots
    assert not same_bits(fused[1].k[0], ref[1].k[0])
    assert not same_bits(fused[1].v[0], ref[1].v[0])
