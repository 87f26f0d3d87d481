"""All decoder layers of a forward through sblayer.c, one C call per layer: the kernels and
values of the op-by-op path (`model/llama.py`), without its ~12 Python calls per layer.

Invariant: bit for bit the op-by-op forward (tests/kernels/test_sblayer.py compares every
logit and every K/V slot). `FusedLayers.build` returns None for a model it does not cover
(a qkv bias, q / k norms, a padded o / gate_up / down width, a mixture-of-experts layer, or
kernels other than sbgemm and sbattn); the model then runs op by op, with the same bits.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np
import torch

from samebits.kernels.cpu import native, sbattn, sbgemm, sbrow
from samebits.kernels.cpu.sbattn import AttentionTables, attention_tables
from samebits.kernels.cpu.sbgemm import FORMATS, SbLinear

_L, _P, _F, _D = ctypes.c_long, ctypes.c_void_p, ctypes.c_float, ctypes.c_double


class _Lin(ctypes.Structure):
    _fields_ = [("w", _P), ("format", _L), ("k", _L), ("np", _L), ("splits", _L)]


class _Weights(ctypes.Structure):
    _fields_ = [
        ("qkv", _Lin), ("o", _Lin), ("gate_up", _Lin), ("down", _Lin),
        ("ln2", _P), ("next_ln", _P), ("k_cache", _P), ("v_cache", _P),
        ("next_k_cache", _P), ("next_v_cache", _P),
    ]  # fmt: skip


class _IO(ctypes.Structure):
    _fields_ = [
        ("n", _L), ("hidden", _L), ("n_heads", _L), ("n_kv", _L), ("dim", _L), ("inter", _L),
        ("threads", _L), ("eps", _D), ("scale", _F),
        ("positions", _P), ("query_req", _P), ("block_tables", _P), ("slot_mapping", _P),
        ("width", _L), ("block_size", _L), ("key_tile", _L), ("span", _L), ("attn_pairs", _L),
        ("cos", _P), ("sin", _P), ("x", _P), ("residual", _P),
        ("qkv", _P), ("q", _P), ("k", _P), ("attn", _P), ("o", _P), ("gate_up", _P),
        ("act", _P), ("down", _P),
        ("gemm_min_macs", _L), ("row_min_elements", _L), ("attn_min_pairs", _L),
    ]  # fmt: skip


def _lin(linear: SbLinear) -> _Lin:
    return _Lin(
        linear.packed.data_ptr(), FORMATS[linear.format], linear.k, linear.np, linear.splits
    )


def covers(model) -> bool:
    """Whether sblayer.c computes this model's layers (see the module docstring)."""
    ops, cfg = model.ops, model.cfg
    if getattr(ops, "linear_kernel", None) != "sbgemm" or ops.attention_kernel != "sbattn":
        return False
    hidden, inter = cfg.hidden_size, cfg.intermediate_size
    for layer in model.layers:
        if getattr(layer, "moe", None) is not None:  # a mixture-of-experts layer
            return False
        linears = (layer.qkv, layer.o, layer.gate_up, layer.down)
        if not all(isinstance(lin, SbLinear) and lin.bias is None for lin in linears):
            return False
        if layer.q_norm is not None or layer.k_norm is not None:
            return False
        if (layer.o.np, layer.gate_up.np, layer.down.np) != (hidden, 2 * inter, hidden):
            return False
    return True


class FusedLayers:
    """The per-layer weight records of one model and KV cache (built once)."""

    def __init__(self, model, kv) -> None:
        self.model, self.kv = model, kv
        layers = model.layers
        self._weights = []
        for i, layer in enumerate(layers):
            last = i + 1 == len(layers)
            self._weights.append(_Weights(
                _lin(layer.qkv), _lin(layer.o), _lin(layer.gate_up), _lin(layer.down),
                layer.ln2.data_ptr(), None if last else layers[i + 1].ln1.data_ptr(),
                kv.k[i].data_ptr(), kv.v[i].data_ptr(),
                None if last else kv.k[i + 1].data_ptr(), None if last else kv.v[i + 1].data_ptr(),
            ))  # fmt: skip
        self._call = _entry()
        self._qkv_width = layers[0].qkv.np

    @classmethod
    def build(cls, model, kv) -> FusedLayers | None:
        return cls(model, kv) if covers(model) else None

    def run(self, x: torch.Tensor, residual: torch.Tensor, batch) -> torch.Tensor:
        """Every layer over the normed input `x` [n, hidden] and the residual stream (updated
        in place); returns the last layer's down-projection output [n, hidden] (what the
        op-by-op loop leaves in `mlp`)."""
        io, buffers = self._io(x, residual, batch)
        for weights in self._weights:
            self._call(ctypes.byref(weights), ctypes.byref(io))
        return buffers["down"]

    def _io(self, x, residual, batch) -> tuple[_IO, dict[str, object]]:
        model, cfg = self.model, self.model.cfg
        n, hd = x.shape[0], cfg.num_attention_heads * cfg.head_dim
        kvd = cfg.num_key_value_heads * cfg.head_dim
        sizes = {
            "qkv": self._qkv_width, "q": hd, "k": kvd, "attn": hd, "o": cfg.hidden_size,
            "gate_up": 2 * cfg.intermediate_size, "act": cfg.intermediate_size,
            "down": cfg.hidden_size,
        }  # fmt: skip
        buffers: dict[str, object] = {
            name: torch.empty((n, width), dtype=torch.float32) for name, width in sizes.items()
        }
        tables = batch.attn if isinstance(batch.attn, AttentionTables) else None
        tables = tables or attention_tables(batch.positions, batch.query_req, batch.block_tables)
        slots = np.ascontiguousarray(batch.slot_mapping.numpy(), dtype=np.int64)
        buffers["slots"] = torch.from_numpy(slots)  # kept alive with the io record
        pos, req, table, width = tables.pointers
        io = _IO(
            n, cfg.hidden_size, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim,
            cfg.intermediate_size, model.ops.num_threads, cfg.rms_norm_eps, model.scale,
            pos, req, table, slots.ctypes.data, width, batch.block_size, model.ops.key_tile,
            model.ops.span, tables.pairs_per_head, model.cos.data_ptr(), model.sin.data_ptr(),
            x.data_ptr(), residual.data_ptr(),
            *(buffers[name].data_ptr() for name in sizes),
            sbgemm.PARALLEL_MIN_MACS, sbrow.PARALLEL_MIN_ELEMENTS, sbattn.PARALLEL_MIN_PAIRS,
        )  # fmt: skip
        buffers["tables"] = tables
        return io, buffers


@lru_cache(maxsize=1)
def _entry():
    entry = native.library().sb_decoder_layer
    entry.argtypes = [ctypes.POINTER(_Weights), ctypes.POINTER(_IO)]
    entry.restype = None
    return entry
