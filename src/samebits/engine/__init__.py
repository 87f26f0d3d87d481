"""The engine core: requests, prefix hashes, the block pool, the KV cache manager and the
scheduler. Pure Python, no torch or numpy (the torch-side `runner` is imported on its own)."""

from samebits.engine.block_pool import BlockPool, KVCacheBlock
from samebits.engine.kv_cache_manager import KVCacheManager
from samebits.engine.prefix_hash import BlockHash, compute_block_hashes, hash_block_tokens
from samebits.engine.request import Request, RequestStatus
from samebits.engine.scheduler import (
    ScheduledRequest,
    Scheduler,
    SchedulerOutput,
    SchedulerStats,
)

__all__ = [
    "BlockHash",
    "BlockPool",
    "KVCacheBlock",
    "KVCacheManager",
    "Request",
    "RequestStatus",
    "ScheduledRequest",
    "Scheduler",
    "SchedulerOutput",
    "SchedulerStats",
    "compute_block_hashes",
    "hash_block_tokens",
]
