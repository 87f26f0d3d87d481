"""`TritonOps` with `KernelPlan.op_by_op` (fused units without a certificate, `gate.resolve`):
the named fused launches run their op-by-op path, with the fused path's bits (interpreter)."""

from __future__ import annotations

import torch
from test_triton_engine import InterpreterTritonOps, _interpreter_plan
from triton_bits import same_bits

from samebits.kernels.placement import TorchPlacement
from samebits.kernels.triton import rows
from samebits.kernels.triton.certified.units import fused_key, qkv_store_key

N, K, EPS = 256, 512, 1e-6  # tiny-llama's o_proj shape: its plan splits K (S = 4)


def _randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed))


def _fused(ops, x, res, w):
    lin = ops.linear(_randn(N, K, seed=1), None, role="o")
    out, res = ops.linear_add_rms_norm(lin, x, res.clone(), w, EPS)
    return out, res


def test_an_op_by_op_fused_unit_skips_the_fused_kernel_and_keeps_its_bits(monkeypatch):
    calls = []
    fused_kernel = rows.sum_add_rms_norm
    monkeypatch.setattr(rows, "sum_add_rms_norm", lambda *a: calls.append(1) or fused_kernel(*a))
    plan = _interpreter_plan(head_dim=16, group=2)
    x, res, w = _randn(3, K, seed=2), _randn(3, N, seed=3), _randn(N, seed=4)
    fused = _fused(InterpreterTritonOps(plan), x, res, w)
    assert calls == [1]  # M = 3 launches the split grid: the fused sum + add + RMSNorm
    unfused_plan = plan.with_op_by_op({"op_by_op": [fused_key("o", N, K, False)]})
    per_op = _fused(InterpreterTritonOps(unfused_plan), x, res, w)
    assert calls == [1]
    assert same_bits(fused[0], per_op[0]) and same_bits(fused[1], per_op[1])
    other = plan.with_op_by_op({"op_by_op": [fused_key("down", N, K, False)]})
    _fused(InterpreterTritonOps(other), x, res, w)
    assert calls == [1, 1]  # another unit's key leaves this one fused


def test_an_op_by_op_qkv_unit_runs_the_placement_path(monkeypatch):
    monkeypatch.setattr(rows, "qkv_rope_store", lambda *a, **k: "fused")
    monkeypatch.setattr(TorchPlacement, "qkv_rope_store", lambda *a, **k: "op by op")
    plan = _interpreter_plan(head_dim=16, group=2)
    batch = type("B", (), {"device_positions": lambda self: None, "slot_mapping": None})()
    kv = type("KV", (), {"k": [None], "v": [None]})()
    args = (None, batch, None, None, kv, 0, 4, 2, 16)
    assert InterpreterTritonOps(plan).qkv_rope_store(*args) == "fused"
    unfused = plan.with_op_by_op({"op_by_op": [qkv_store_key(4, 2, 16)]})
    assert InterpreterTritonOps(unfused).qkv_rope_store(*args) == "op by op"
