"""`KVCacheManager`: per-request block tables on top of a `BlockPool`, with prefix caching.

A request's block table maps logical block `i` (positions `[i*block_size, (i+1)*block_size)`)
to a physical block. Full blocks whose K/V has been computed are registered in the prefix
cache under their chained hash (`prefix_hash`), prompt and generated tokens alike; a later
request whose prefix hashes (and tokens) match reuses them instead of recomputing.

Invariants (checked by `check_integrity`, on top of `BlockPool.check_integrity`):
- each block's `ref_cnt` equals the number of block tables (held requests) that contain it;
- a table holds no block twice and covers the request's computed tokens;
- a cached block at table index `i` carries exactly the request's hash of block `i`;
- a prefix hit never covers a request's last token (its logits must be computed).
"""

from __future__ import annotations

from collections.abc import Sequence

from samebits.engine import prefix_hash
from samebits.engine.block_pool import BlockPool, KVCacheBlock
from samebits.engine.request import Request


def cdiv(a: int, b: int) -> int:
    """Ceiling division for non-negative `a` and positive `b`."""
    return -(-a // b)


class KVCacheManager:
    """Allocates, caches and frees the KV blocks of running requests."""

    def __init__(
        self,
        block_size: int,
        num_blocks: int,
        enable_prefix_caching: bool = True,
        cache_salt: bytes = b"",
    ) -> None:
        if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
            raise ValueError(f"block_size must be a positive int, got {block_size!r}")
        prefix_hash.root_digest(cache_salt)  # validates the salt
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.cache_salt = cache_salt
        self.block_pool = BlockPool(num_blocks)
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        self.num_cached_blocks: dict[str, int] = {}
        self._holders: dict[str, Request] = {}
        # get_block_ids' answer per request, dropped whenever its table changes
        # (allocate_slots, free): a decode step reads every running table
        self._block_ids: dict[str, tuple[int, ...]] = {}

    @property
    def num_free_blocks(self) -> int:
        return self.block_pool.num_free_blocks

    def get_usage(self) -> float:
        return self.block_pool.get_usage()

    def reset_prefix_cache(self) -> bool:
        """Drop the prefix cache when no request holds a block (see `BlockPool`)."""
        return self.block_pool.reset_prefix_cache()

    def update_block_hashes(self, request: Request) -> None:
        """Extend `request.block_hashes` to every full block of its known tokens."""
        prefix_hash.extend_block_hashes(
            request.block_hashes, request.all_token_ids, self.block_size, self.cache_salt
        )

    def get_computed_blocks(self, request: Request) -> tuple[list[KVCacheBlock], int]:
        """Longest chain of cached full blocks matching the request's prefix (hash and tokens),
        and the number of tokens they cover. Never covers the request's last token. Read-only
        (the hit blocks are only referenced by `allocate_slots`)."""
        if not self.enable_prefix_caching:
            return [], 0
        self.update_block_hashes(request)
        max_blocks = (request.num_tokens - 1) // self.block_size
        hits: list[KVCacheBlock] = []
        for block_hash in request.block_hashes[:max_blocks]:
            block = self.block_pool.get_cached_block(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits, len(hits) * self.block_size

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        new_computed_blocks: Sequence[KVCacheBlock] = (),
    ) -> list[KVCacheBlock] | None:
        """Make the table cover `num_computed_tokens + len(new_computed_blocks) * block_size +
        num_new_tokens` positions. `new_computed_blocks` (a prefix hit) is only allowed for a
        request that holds no blocks and has no computed tokens. Returns the newly allocated
        blocks, or None (state unchanged) when the free blocks do not suffice."""
        table = self.req_to_blocks.get(request.request_id, [])
        num_hit_tokens = self._check_allocation(request, num_new_tokens, new_computed_blocks)
        total = request.num_computed_tokens + num_hit_tokens + num_new_tokens
        num_new_blocks = cdiv(total, self.block_size) - len(table) - len(new_computed_blocks)
        evictable_hits = sum(1 for block in new_computed_blocks if block.ref_cnt == 0)
        if num_new_blocks > self.block_pool.num_free_blocks - evictable_hits:
            return None
        self.block_pool.touch(new_computed_blocks)
        new_blocks = self.block_pool.get_new_blocks(max(num_new_blocks, 0))
        if request.request_id not in self.req_to_blocks:
            self.req_to_blocks[request.request_id] = table
            self.num_cached_blocks[request.request_id] = len(new_computed_blocks)
            self._holders[request.request_id] = request
        table.extend(new_computed_blocks)
        table.extend(new_blocks)
        if new_computed_blocks or new_blocks:
            self._block_ids.pop(request.request_id, None)
        return new_blocks

    def _check_allocation(
        self, request: Request, num_new_tokens: int, new_computed_blocks: Sequence[KVCacheBlock]
    ) -> int:
        rid = request.request_id
        if num_new_tokens < 1:
            raise ValueError(f"request {rid!r}: num_new_tokens must be >= 1, got {num_new_tokens}")
        num_hit_tokens = len(new_computed_blocks) * self.block_size
        if new_computed_blocks and (rid in self.req_to_blocks or request.num_computed_tokens):
            raise ValueError(f"request {rid!r}: a prefix hit is only allowed on admission")
        total = request.num_computed_tokens + num_hit_tokens + num_new_tokens
        known = request.num_tokens + request.num_output_placeholders
        if total > known:
            raise ValueError(f"request {rid!r}: {total} tokens to cover but it only has {known}")
        return num_hit_tokens

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        """Register the request's full blocks within its first `num_computed_tokens` tokens
        (whose K/V is now computed) in the prefix cache."""
        if not self.enable_prefix_caching:
            return
        rid = request.request_id
        num_full = num_computed_tokens // self.block_size
        num_cached = self.num_cached_blocks[rid]
        if num_full <= num_cached:
            return
        self.update_block_hashes(request)
        table = self.req_to_blocks[rid]
        self.block_pool.cache_full_blocks(
            table[num_cached:num_full], request.block_hashes[num_cached:num_full]
        )
        self.num_cached_blocks[rid] = num_full

    def free(self, request: Request) -> None:
        """Release the request's blocks, last block first, so a sequence's tail is evicted
        before its head (the head is the part other requests can share)."""
        rid = request.request_id
        table = self.req_to_blocks.pop(rid, [])
        self._block_ids.pop(rid, None)
        self.num_cached_blocks.pop(rid, None)
        self._holders.pop(rid, None)
        self.block_pool.free_blocks(reversed(table))

    def get_block_ids(self, request_id: str) -> tuple[int, ...]:
        """Physical block ids of the request's table (empty when it holds none)."""
        ids = self._block_ids.get(request_id)
        if ids is None:
            ids = tuple(block.block_id for block in self.req_to_blocks.get(request_id, ()))
            if request_id in self.req_to_blocks:
                self._block_ids[request_id] = ids
        return ids

    def num_blocks(self, request_id: str) -> int:
        """Length of the request's table (0 when it holds none)."""
        return len(self.req_to_blocks.get(request_id, ()))

    def held_request_ids(self) -> tuple[str, ...]:
        """Ids of the requests that currently hold a block table (allocation order)."""
        return tuple(self.req_to_blocks)

    def check_integrity(self) -> None:
        """Raise AssertionError naming the first broken invariant (see module docstring)."""
        self.block_pool.check_integrity()
        holders: dict[int, int] = {}
        for rid, table in self.req_to_blocks.items():
            self._check_table(self._holders[rid], table)
            cached = self._block_ids.get(rid)
            if cached is not None and cached != tuple(block.block_id for block in table):
                raise AssertionError(f"request {rid!r}: stale cached block ids {cached}")
            for block in table:
                holders[block.block_id] = holders.get(block.block_id, 0) + 1
        for block in self.block_pool.blocks:
            expected = holders.get(block.block_id, 0)
            if block.ref_cnt != expected:
                raise AssertionError(
                    f"block {block.block_id} has ref_cnt {block.ref_cnt} "
                    f"but {expected} block tables hold it"
                )

    def _check_table(self, request: Request, table: list[KVCacheBlock]) -> None:
        rid = request.request_id
        ids = [block.block_id for block in table]
        if len(set(ids)) != len(ids):
            raise AssertionError(f"request {rid!r}: a block appears twice in its table {ids}")
        if len(table) * self.block_size < request.num_computed_tokens:
            raise AssertionError(
                f"request {rid!r}: table {ids} does not cover "
                f"{request.num_computed_tokens} computed tokens"
            )
        known = request.num_tokens + request.num_output_placeholders
        if len(table) > cdiv(known, self.block_size):
            raise AssertionError(f"request {rid!r}: table {ids} exceeds its {known} tokens")
        self._check_table_hashes(request, table)

    def _check_table_hashes(self, request: Request, table: list[KVCacheBlock]) -> None:
        num_cached = self.num_cached_blocks.get(request.request_id, 0)
        if num_cached * self.block_size > request.num_computed_tokens:
            raise AssertionError(
                f"request {request.request_id!r}: {num_cached} cached blocks exceed "
                f"{request.num_computed_tokens} computed tokens"
            )
        for index, block in enumerate(table):
            if block.block_hash is None:
                continue
            if index >= num_cached or block.block_hash != request.block_hashes[index]:
                raise AssertionError(
                    f"request {request.request_id!r}: block {block.block_id} at table index "
                    f"{index} carries a hash that is not the request's block {index} hash"
                )
