"""The spec's Ref forward: a cold, batch-of-one, no-cache pass over a whole history.

It lives in the engine layer (it builds the runner's flat batch from a `ScheduledRequest`), so
`samebits.deployment` stays below the engine: the engine imports the deployment, never the
other way round.
"""

from __future__ import annotations

import dataclasses

import torch

from samebits.engine.runner import build_flat_batch
from samebits.engine.scheduler import ScheduledRequest


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
