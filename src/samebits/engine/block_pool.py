"""`BlockPool`: the physical KV blocks, their reference counts, the LRU free queue and the
prefix-cache map from block hash to block.

Invariants (checked by `check_integrity`):
- a block is in the free queue iff its `ref_cnt == 0`;
- the free queue is in LRU order: blocks appear in the order they last became free (each carries
  a logical `free_stamp`, strictly increasing from head to tail), and allocation takes the
  least recently freed block: every free block is newer than every block allocated so far;
- `cached_block_hash_to_block[d]` is a block whose `block_hash.digest == d`, and every block with
  a `block_hash` is the map's entry for its digest (one block per digest);
- a cached block's content is final: it is only rewritten after eviction clears its hash.

Eviction is lazy: a free block keeps its hash (and stays a possible prefix hit) until
`get_new_blocks` hands it out again.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from samebits.engine.prefix_hash import BlockHash


@dataclass(eq=False)
class KVCacheBlock:
    """One physical block of `block_size` KV slots. `block_hash` is set while the block is in
    the prefix cache; `free_stamp` is the logical time it last entered the free queue."""

    block_id: int
    ref_cnt: int = 0
    block_hash: BlockHash | None = None
    free_stamp: int = 0


class BlockPool:
    """Blocks `0 .. num_blocks-1`, all free at start (free queue in block-id order)."""

    def __init__(self, num_blocks: int) -> None:
        if not isinstance(num_blocks, int) or isinstance(num_blocks, bool) or num_blocks < 1:
            raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
        self.num_blocks = num_blocks
        self.blocks = [KVCacheBlock(i, free_stamp=i) for i in range(num_blocks)]
        self.free_block_queue: OrderedDict[int, KVCacheBlock] = OrderedDict(
            (block.block_id, block) for block in self.blocks
        )
        self.cached_block_hash_to_block: dict[bytes, KVCacheBlock] = {}
        self._clock = num_blocks
        self._newest_allocated_stamp = -1

    @property
    def num_free_blocks(self) -> int:
        """Blocks with `ref_cnt == 0` (cached or not): what `get_new_blocks` can hand out."""
        return len(self.free_block_queue)

    def get_usage(self) -> float:
        """Fraction of blocks held by at least one request."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    def get_new_blocks(self, num_blocks: int) -> list[KVCacheBlock]:
        """Pop `num_blocks` from the LRU head, evicting any cached one; each gets `ref_cnt=1`."""
        if num_blocks > self.num_free_blocks:
            raise ValueError(f"cannot allocate {num_blocks} blocks, {self.num_free_blocks} free")
        new_blocks = []
        for _ in range(num_blocks):
            _, block = self.free_block_queue.popitem(last=False)
            self._newest_allocated_stamp = max(self._newest_allocated_stamp, block.free_stamp)
            self._evict(block)
            block.ref_cnt = 1
            new_blocks.append(block)
        return new_blocks

    def _evict(self, block: KVCacheBlock) -> None:
        """Drop `block` from the prefix cache (no-op when it is not cached)."""
        if block.block_hash is None:
            return
        if self.cached_block_hash_to_block.get(block.block_hash.digest) is block:
            del self.cached_block_hash_to_block[block.block_hash.digest]
        block.block_hash = None

    def reset_prefix_cache(self) -> bool:
        """Forget every cached block (vLLM's name), only when no block is held (every
        `ref_cnt == 0`); returns whether it did. The free queue's order is kept."""
        if self.num_free_blocks != self.num_blocks:
            return False
        for block in self.blocks:
            block.block_hash = None
        self.cached_block_hash_to_block.clear()
        return True

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Take one more reference on each block (a prefix hit); a free block leaves the queue."""
        for block in blocks:
            if block.ref_cnt == 0:
                del self.free_block_queue[block.block_id]
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Drop one reference on each block; blocks reaching 0 join the queue tail in the given
        order (callers pass a request's blocks in reverse, so its last blocks go first)."""
        for block in ordered_blocks:
            if block.ref_cnt < 1:
                raise ValueError(f"block {block.block_id} freed with ref_cnt {block.ref_cnt}")
            block.ref_cnt -= 1
            if block.ref_cnt == 0:
                block.free_stamp = self._clock
                self._clock += 1
                self.free_block_queue[block.block_id] = block

    def cache_full_blocks(
        self, blocks: Sequence[KVCacheBlock], block_hashes: Sequence[BlockHash]
    ) -> None:
        """Register full, computed blocks under their hashes. A block already cached keeps its
        hash (it must be the same); a digest already owned by another block stays with that
        block and this one remains uncached (two requests computed the same prefix)."""
        if len(blocks) != len(block_hashes):
            raise ValueError(f"{len(blocks)} blocks but {len(block_hashes)} block hashes")
        for block, block_hash in zip(blocks, block_hashes, strict=True):
            if block.block_hash is not None:
                if block.block_hash != block_hash:
                    raise ValueError(f"block {block.block_id} is cached under another hash")
                continue
            if block_hash.digest not in self.cached_block_hash_to_block:
                block.block_hash = block_hash
                self.cached_block_hash_to_block[block_hash.digest] = block

    def get_cached_block(self, block_hash: BlockHash) -> KVCacheBlock | None:
        """The cached block for `block_hash`, or None. Digest and token ids must both match."""
        block = self.cached_block_hash_to_block.get(block_hash.digest)
        if block is None or block.block_hash != block_hash:
            return None
        return block

    def check_integrity(self) -> None:
        """Raise AssertionError naming the first broken pool invariant (see module docstring)."""
        for index, block in enumerate(self.blocks):
            in_queue = self.free_block_queue.get(index) is block
            if block.block_id != index or block.ref_cnt < 0 or in_queue != (block.ref_cnt == 0):
                raise AssertionError(
                    f"blocks[{index}]: block_id {block.block_id}, ref_cnt {block.ref_cnt}, "
                    f"in free queue: {in_queue}"
                )
        if len(self.free_block_queue) != sum(b.ref_cnt == 0 for b in self.blocks):
            raise AssertionError("the free queue holds blocks that are not in the pool")
        self._check_lru_order()
        self._check_hash_map()

    def _check_lru_order(self) -> None:
        stamps = [block.free_stamp for block in self.free_block_queue.values()]
        if any(before >= after for before, after in zip(stamps, stamps[1:], strict=False)):
            raise AssertionError(f"free queue not in LRU order: stamps {stamps}")
        if stamps and stamps[0] <= self._newest_allocated_stamp:
            raise AssertionError(
                f"a block freed at {self._newest_allocated_stamp} was allocated before older "
                f"free blocks (free queue stamps {stamps})"
            )

    def _check_hash_map(self) -> None:
        for digest, block in self.cached_block_hash_to_block.items():
            if block.block_hash is None or block.block_hash.digest != digest:
                raise AssertionError(
                    f"hash map entry {digest.hex()[:12]} points to block {block.block_id}, "
                    f"which carries {block.block_hash}"
                )
        for block in self.blocks:
            if block.block_hash is None:
                continue
            if self.cached_block_hash_to_block.get(block.block_hash.digest) is not block:
                raise AssertionError(
                    f"block {block.block_id} carries a hash the map does not give to it"
                )
