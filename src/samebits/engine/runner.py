"""ModelRunner: SchedulerOutput -> flat tensors -> one forward pass -> logits rows.

The only engine module that touches torch. One forward pass per step covers every scheduled
token of every request (prefill chunks and decode tokens alike); logits are computed only for
the rows that are sampled, and for every row of a chunk scheduled with `all_rows` (prompt
logprobs). The final norm and the LM head are row-invariant, so asking for more rows never
changes a row's bits.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from samebits.engine.graph_policy import GraphConfig
from samebits.engine.scheduler import ScheduledRequest
from samebits.graphs.runner import DecodeGraphRunner
from samebits.kernels.metadata import FlatBatch


def build_flat_batch(scheduled, block_size: int, device: torch.device | str = "cpu") -> FlatBatch:
    """Flatten scheduled requests (see docs/architecture.md, scheduler -> runner contract).
    The tensors the model reads are put on `device` in one host-to-device copy."""
    counts = [len(s.token_ids) for s in scheduled]
    starts = np.array([s.start_position for s in scheduled], dtype=np.int64)
    query_req = np.repeat(np.arange(len(scheduled), dtype=np.int64), counts)
    query_start_loc = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    positions = np.arange(query_start_loc[-1], dtype=np.int64) - query_start_loc[query_req]
    positions += starts[query_req]
    width = max(len(s.block_table) for s in scheduled)
    tables = np.zeros((len(scheduled), width), dtype=np.int64)
    for i, s in enumerate(scheduled):
        tables[i, : len(s.block_table)] = s.block_table
    slots = tables[query_req, positions // block_size] * block_size + positions % block_size
    last_rows = logits_rows(scheduled, query_start_loc)
    ids = np.fromiter((t for s in scheduled for t in s.token_ids), np.int64, len(positions))
    ids_t, slots_t, rows_t, pos_t = _to_device(
        device, ids, slots, np.array(last_rows, dtype=np.int64), positions
    )
    return FlatBatch(
        input_ids=ids_t,
        positions=positions,
        query_req=query_req,
        query_start_loc=query_start_loc,
        seq_lens=starts + np.array(counts, dtype=np.int64),
        slot_mapping=slots_t,
        block_tables=tables,
        block_size=block_size,
        logits_indices=rows_t,
        position_ids=None if pos_t.device.type == "cpu" else pos_t,
    )


def logits_rows(scheduled, query_start_loc: np.ndarray) -> list[int]:
    """Flat rows whose logits a step computes, in batch order: every row of an `all_rows`
    chunk, else the last row of a `sample` chunk."""
    rows: list[int] = []
    for i, s in enumerate(scheduled):
        end = int(query_start_loc[i + 1])
        if getattr(s, "all_rows", False):
            rows.extend(range(int(query_start_loc[i]), end))
        elif s.sample:
            rows.append(end - 1)
    return rows


class StepLogits(dict):
    """What `ModelRunner.execute` returns: a dict `request_id -> float32 logits row` for each
    `sample=True` request (what a sampler needs), plus `chunk_rows`: `request_id ->
    (start_position, float32 [n, vocab])` for each `all_rows` chunk, row j being position
    `start_position + j` (its last row is also the sampled row when the chunk samples)."""

    def __init__(self, sampled=(), chunk_rows=None) -> None:
        super().__init__(sampled)
        self.chunk_rows: dict[str, tuple[int, np.ndarray]] = dict(chunk_rows or {})


def _to_device(device, *arrays: np.ndarray) -> list[torch.Tensor]:
    """int64 host arrays -> tensors on `device`, packed into one copy (zero-copy on CPU)."""
    if torch.device(device).type == "cpu":
        return [torch.from_numpy(np.ascontiguousarray(a)) for a in arrays]
    packed = torch.from_numpy(np.concatenate(arrays)).pin_memory().to(device, non_blocking=True)
    return list(packed.split([len(a) for a in arrays]))


def kv_bytes_per_block(model, block_size: int) -> int:
    """Bytes one KV-cache block takes over all layers (K and V) in the model's cache dtype."""
    cfg = model.cfg
    elem = torch.empty((), dtype=model.ops.act_dtype).element_size()
    return 2 * cfg.num_hidden_layers * block_size * cfg.num_key_value_heads * cfg.head_dim * elem


def kv_blocks_for_device(model, block_size: int, utilization: float) -> int:
    """KV-cache blocks for a GPU model from the device's free memory now (weights loaded).
    Memory torch's caching allocator holds but no live tensor uses (an engine built and
    dropped earlier in this process: its KV cache, its graph pools) counts as free: this
    process reuses it. Unreachable engines are collected first."""
    import gc

    from samebits.config import kv_blocks_for_memory

    gc.collect()
    device = model.ops.device
    free, total = torch.cuda.mem_get_info(device)
    reusable = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    per_block = kv_bytes_per_block(model, block_size)
    return kv_blocks_for_memory(total, free + reusable, utilization, per_block)


class ModelRunner:
    """Owns the paged KV cache (num_blocks * block_size slots per layer) and runs the model.

    With `graphs` enabled, pure decode steps replay a captured graph per batch bucket
    (`samebits.graphs.runner`); the cache then has one block more, the padding rows' sink, which the
    block pool (blocks 0 .. num_blocks - 1) never hands out."""

    def __init__(
        self, model, block_size: int, num_blocks: int, graphs: GraphConfig | None = None,
        max_model_len: int | None = None,
    ) -> None:  # fmt: skip
        self.model = model
        self.block_size = block_size
        self.device = model.ops.device
        graphs = graphs or GraphConfig()
        sink = 1 if graphs.enabled else 0
        self.kv_cache = model.new_kv_cache((num_blocks + sink) * block_size)
        self.graphs: DecodeGraphRunner | None = None
        if graphs.enabled:
            if max_model_len is None:
                raise ValueError("decode graphs need max_model_len (the block table width)")
            self.graphs = DecodeGraphRunner(
                model, self.kv_cache, graphs, block_size, num_blocks, max_model_len
            )
            if graphs.capture_at_start:
                self.graphs.capture_all()

    def execute(self, sched_out) -> StepLogits:
        """One float32 logits row per scheduled request with `sample=True`, and every row of
        each `all_rows` chunk in `chunk_rows` (see StepLogits)."""
        scheduled = sched_out.scheduled
        if not scheduled:
            return StepLogits()
        rows = self.graphs.run(scheduled) if self.graphs is not None else None
        if rows is not None:  # one row per request, in batch order
            logits = host_rows(rows, copy=True)
            return StepLogits(
                {s.request_id: logits[i] for i, s in enumerate(scheduled) if s.sample}
            )
        batch = build_flat_batch(scheduled, self.block_size, self.device)
        return split_rows(scheduled, host_rows(self.model.forward(batch, self.kv_cache)))

    def stats(self) -> dict[str, int]:
        """Graph replays and eager steps (empty without graphs)."""
        return self.graphs.stats() if self.graphs is not None else {}


def host_rows(logits: torch.Tensor, copy: bool = False) -> np.ndarray:
    """float32 logits rows as a host array the caller owns. On a GPU: one asynchronous copy
    into fresh pinned memory (torch's caching host allocator; the array keeps it alive) and one
    stream sync per step. On the CPU: the tensor's own memory, copied when `copy` (a graph's
    output is overwritten by its next replay)."""
    if logits.device.type == "cpu":
        return logits.numpy().copy() if copy else logits.numpy()
    host = torch.empty(logits.shape, dtype=logits.dtype, pin_memory=True)
    host.copy_(logits, non_blocking=True)
    torch.cuda.current_stream(logits.device).synchronize()
    return host.numpy()


def split_rows(scheduled, logits: np.ndarray) -> StepLogits:
    """The eager forward's rows (`logits_rows` order) handed out per request."""
    sampled: dict[str, np.ndarray] = {}
    chunk_rows: dict[str, tuple[int, np.ndarray]] = {}
    at = 0
    for s in scheduled:
        if getattr(s, "all_rows", False):
            rows = logits[at : at + len(s.token_ids)]
            chunk_rows[s.request_id] = (s.start_position, rows)
            at += len(s.token_ids)
            if s.sample:
                sampled[s.request_id] = rows[-1]
        elif s.sample:
            sampled[s.request_id] = logits[at]
            at += 1
    return StepLogits(sampled, chunk_rows)


def cold_logits(deployment, token_ids, all_rows: bool = False):
    """Cold, batch-of-one, no-cache forward over `token_ids` (the spec's Ref).

    Returns the float32 logits of the last position as a numpy row, or of every position
    ([len, vocab]) with `all_rows`. Uses a fresh KV cache with an identity block table.
    """
    n = len(token_ids)
    block = 16
    num_blocks = -(-n // block)
    ids = tuple(int(t) for t in token_ids)
    req = ScheduledRequest("ref", ids, 0, tuple(range(num_blocks)), sample=True)
    device = deployment.model.ops.device
    batch = build_flat_batch([req], block, device)
    if all_rows:
        batch = dataclasses.replace(batch, logits_indices=torch.arange(n, device=device))
    kv = deployment.model.new_kv_cache(num_blocks * block)
    logits = deployment.model.forward(batch, kv).cpu().numpy()
    return logits if all_rows else logits[-1]
