"""A rank's decoder (the shard), and rank 0's facade over it that drives the other ranks.

Invariant: every rank runs the same sequence of collectives: rank 0 broadcasts each command
(a KV cache to allocate, a forward's inputs, stop) before it runs its own part, and every
rank's forward is the same decoder code over its shard.
"""

from __future__ import annotations

import contextlib
import itertools
import weakref

import numpy as np
import torch

from samebits.kernels.metadata import FlatBatch
from samebits.kernels.registry import make_ops
from samebits.model.llama import DecoderModel
from samebits.parallel.comm import Group
from samebits.parallel.linear import TensorParallelOps
from samebits.parallel.shard import local_config, shard_stored, shard_weights
from samebits.parallel.topology import TensorParallelError

_TENSORS = ("input_ids", "slot_mapping", "logits_indices", "position_ids")
_ARRAYS = ("positions", "query_req", "query_start_loc", "seq_lens", "block_tables")


def build_rank_model(loaded, plan, group: Group, max_positions: int) -> DecoderModel:
    """This rank's DecoderModel: its weight blocks, its heads, the sharding op set."""
    cfg, t = loaded.config, group.world_size
    weights = shard_weights(loaded.weights, cfg, group.rank, t)
    stored = shard_stored(getattr(loaded, "quantized", None) or {}, loaded.weights, group.rank, t)
    ops = TensorParallelOps(make_ops(plan), plan, group, cfg.vocab_size)
    local = local_config(cfg, t)
    return DecoderModel(local, weights, plan, max_positions, quantized=stored, ops=ops)


def pack_batch(batch: FlatBatch) -> dict:
    """The forward's inputs as host arrays (what the other ranks need; `attn` is rebuilt)."""
    out = {name: getattr(batch, name) for name in _ARRAYS}
    for name in _TENSORS:
        t = getattr(batch, name)
        out[name] = None if t is None else t.cpu().numpy()
    out["block_size"] = batch.block_size
    return out


def unpack_batch(packed: dict, device: torch.device) -> FlatBatch:
    tensors = {
        n: None if packed[n] is None else torch.from_numpy(np.ascontiguousarray(packed[n])).to(device)
        for n in _TENSORS
    }  # fmt: skip
    arrays = {n: packed[n] for n in _ARRAYS}
    return FlatBatch(**tensors, **arrays, block_size=packed["block_size"])


class _State:
    """Shared by the facade and its finalizer: KV caches freed since the last command, the
    first failure (then every later call raises it)."""

    def __init__(self) -> None:
        self.freed: list[int] = []
        self.failure: TensorParallelError | None = None
        self.closed = False


class TensorParallelModel:
    """Rank 0's model: the DecoderModel protocol the runner uses (`forward`, `new_kv_cache`,
    `cfg`, `ops`, ...), each call broadcast to the other ranks first. `close()` stops them
    (also at garbage collection and interpreter exit)."""

    def __init__(self, local: DecoderModel, group: Group, workers) -> None:
        self.local, self.group, self.workers = local, group, workers
        self.cfg, self.ops, self.plan = local.cfg, local.ops, local.plan
        self.tensor_parallel_size = group.world_size
        self._state = _State()
        self._ids = itertools.count()
        self._finalizer = weakref.finalize(self, _shutdown, group, workers, self._state)

    def __getattr__(self, name: str):
        if name == "local":  # not built yet (or being unpickled): no recursion
            raise AttributeError(name)
        return getattr(self.local, name)

    def new_kv_cache(self, num_slots: int):
        cache_id = next(self._ids)
        self._command("kv", cache_id, num_slots)
        kv = self.local.new_kv_cache(num_slots)
        kv.tp_cache_id = cache_id
        weakref.finalize(kv, self._state.freed.append, cache_id)
        return kv

    def forward(self, batch: FlatBatch, kv) -> torch.Tensor:
        self._command("forward", kv.tp_cache_id, pack_batch(batch))
        return self._guard(lambda: self.local.forward(batch, kv))

    def close(self) -> None:
        """Stop the other ranks and leave the process group (idempotent)."""
        self._finalizer()

    def _command(self, *message) -> None:
        state = self._state
        if state.closed:
            raise TensorParallelError("the tensor-parallel deployment is closed")
        freed, state.freed[:] = list(state.freed), []
        self._guard(lambda: self.group.broadcast((message, freed)))

    def _guard(self, call):
        """`call()`, a rank's failure raised as TensorParallelError naming it."""
        state = self._state
        if state.failure is not None:
            raise state.failure
        if self.workers is not None:
            self.workers.check(state)
        try:
            return call()
        except RuntimeError as exc:
            if self.workers is not None:
                self.workers.check(state, wait_s=5.0)
            state.failure = TensorParallelError(
                f"tensor-parallel collective failed (a rank exited or timed out): {exc}"
            )
            raise state.failure from exc


def _shutdown(group: Group, workers, state: _State) -> None:
    """Tell the other ranks to stop (unless one failed), wait for them, leave the group."""
    if state.closed:
        return
    state.closed = True
    if state.failure is None:
        with contextlib.suppress(RuntimeError):
            group.broadcast((("stop",), []))
    if workers is not None:
        workers.join()
    group.destroy()
