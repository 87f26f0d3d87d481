"""ModelRunner: SchedulerOutput -> flat tensors -> one forward pass -> sampled logits rows.

The only engine module that touches torch. One forward pass per step covers every scheduled
token of every request (prefill chunks and decode tokens alike); logits are computed only for
the rows that are sampled.
"""

from __future__ import annotations

import numpy as np
import torch

from samebits.kernels.metadata import FlatBatch


def build_flat_batch(scheduled, block_size: int) -> FlatBatch:
    """Flatten scheduled requests (see docs/architecture.md, scheduler -> runner contract)."""
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
    last_rows = [int(query_start_loc[i + 1]) - 1 for i, s in enumerate(scheduled) if s.sample]
    ids = [t for s in scheduled for t in s.token_ids]
    return FlatBatch(
        input_ids=torch.tensor(ids, dtype=torch.int64),
        positions=positions,
        query_req=query_req,
        query_start_loc=query_start_loc,
        seq_lens=starts + np.array(counts, dtype=np.int64),
        slot_mapping=torch.from_numpy(slots),
        block_tables=tables,
        block_size=block_size,
        logits_indices=torch.tensor(last_rows, dtype=torch.int64),
    )


class ModelRunner:
    """Owns the paged KV cache (num_blocks * block_size slots per layer) and runs the model."""

    def __init__(self, model, block_size: int, num_blocks: int):
        self.model = model
        self.block_size = block_size
        self.kv_cache = model.new_kv_cache(num_blocks * block_size)

    def execute(self, sched_out) -> dict[str, np.ndarray]:
        """Returns one float32 logits row per scheduled request with `sample=True`."""
        scheduled = sched_out.scheduled
        if not scheduled:
            return {}
        batch = build_flat_batch(scheduled, self.block_size)
        sampled = [s.request_id for s in scheduled if s.sample]
        logits = self.model.forward(batch, self.kv_cache).numpy()
        return {rid: logits[i] for i, rid in enumerate(sampled)}
