"""BlockPool: allocation from the LRU head, touch/free reference counting, lazy eviction, the
hash -> block map, and check_integrity catching broken invariants."""

from __future__ import annotations

import pytest

from samebits.engine.block_pool import BlockPool
from samebits.engine.prefix_hash import BlockHash, compute_block_hashes


def _ids(blocks) -> list[int]:
    return [b.block_id for b in blocks]


def _hashes(n: int, first: int = 0) -> list[BlockHash]:
    return compute_block_hashes(list(range(first, first + 2 * n)), 2, b"")


def test_initial_state() -> None:
    pool = BlockPool(4)
    assert pool.num_free_blocks == 4
    assert list(pool.free_block_queue) == [0, 1, 2, 3]
    assert pool.get_usage() == 0.0
    pool.check_integrity()


@pytest.mark.parametrize("bad", [0, -1, True, 2.0])
def test_bad_size(bad) -> None:
    with pytest.raises(ValueError, match="num_blocks"):
        BlockPool(bad)


def test_get_new_blocks_pops_head_with_ref_one() -> None:
    pool = BlockPool(4)
    blocks = pool.get_new_blocks(3)
    assert _ids(blocks) == [0, 1, 2]
    assert [b.ref_cnt for b in blocks] == [1, 1, 1]
    assert pool.num_free_blocks == 1
    assert pool.get_usage() == 0.75
    pool.check_integrity()
    with pytest.raises(ValueError, match="cannot allocate 2 blocks, 1 free"):
        pool.get_new_blocks(2)


def test_free_appends_in_given_order_and_allocation_is_lru() -> None:
    pool = BlockPool(4)
    blocks = pool.get_new_blocks(4)
    pool.free_blocks([blocks[1]])
    pool.free_blocks(reversed([blocks[0], blocks[2], blocks[3]]))
    assert list(pool.free_block_queue) == [1, 3, 2, 0]
    pool.check_integrity()
    assert _ids(pool.get_new_blocks(2)) == [1, 3]
    pool.check_integrity()


def test_shared_block_returns_to_queue_only_at_zero() -> None:
    pool = BlockPool(3)
    [block] = pool.get_new_blocks(1)
    pool.touch([block])
    assert block.ref_cnt == 2
    pool.free_blocks([block])
    assert block.block_id not in pool.free_block_queue
    pool.free_blocks([block])
    assert list(pool.free_block_queue) == [1, 2, 0]
    with pytest.raises(ValueError, match="freed with ref_cnt 0"):
        pool.free_blocks([block])


def test_touch_takes_a_free_block_out_of_the_middle() -> None:
    pool = BlockPool(4)
    pool.touch([pool.blocks[2]])
    assert list(pool.free_block_queue) == [0, 1, 3]
    assert pool.blocks[2].ref_cnt == 1
    pool.check_integrity()


def test_cache_and_lookup_compare_digest_and_tokens() -> None:
    pool = BlockPool(4)
    blocks = pool.get_new_blocks(2)
    hashes = _hashes(2)
    pool.cache_full_blocks(blocks, hashes)
    assert pool.get_cached_block(hashes[0]) is blocks[0]
    assert pool.get_cached_block(hashes[1]) is blocks[1]
    forged = BlockHash(hashes[0].digest, (99, 98))  # same digest, other tokens
    assert pool.get_cached_block(forged) is None
    assert pool.get_cached_block(_hashes(1, first=50)[0]) is None
    pool.check_integrity()


def test_cached_free_block_stays_a_hit_until_reused() -> None:
    pool = BlockPool(2)
    blocks = pool.get_new_blocks(2)
    hashes = _hashes(2)
    pool.cache_full_blocks(blocks, hashes)
    pool.free_blocks(reversed(blocks))
    assert pool.get_cached_block(hashes[0]) is blocks[0]
    [reused] = pool.get_new_blocks(1)  # LRU head: block 1 (freed first, being the tail)
    assert reused is blocks[1]
    assert reused.block_hash is None
    assert pool.get_cached_block(hashes[1]) is None
    assert pool.get_cached_block(hashes[0]) is blocks[0]
    pool.check_integrity()


def test_duplicate_digest_keeps_first_block() -> None:
    pool = BlockPool(3)
    first, second = pool.get_new_blocks(2)
    [h] = _hashes(1)
    pool.cache_full_blocks([first], [h])
    pool.cache_full_blocks([second], [h])
    assert second.block_hash is None
    assert pool.get_cached_block(h) is first
    pool.cache_full_blocks([first], [h])  # re-caching the same hash is a no-op
    with pytest.raises(ValueError, match="cached under another hash"):
        pool.cache_full_blocks([first], _hashes(1, first=7))
    with pytest.raises(ValueError, match="1 blocks but 2 block hashes"):
        pool.cache_full_blocks([second], _hashes(2))
    pool.check_integrity()


def test_integrity_catches_ref_cnt_vs_queue() -> None:
    pool = BlockPool(3)
    pool.blocks[1].ref_cnt = 1
    with pytest.raises(AssertionError, match=r"blocks\[1\]: .*ref_cnt 1, in free queue: True"):
        pool.check_integrity()


def test_integrity_catches_block_missing_from_queue() -> None:
    pool = BlockPool(3)
    del pool.free_block_queue[2]
    with pytest.raises(AssertionError, match=r"blocks\[2\]"):
        pool.check_integrity()


def test_integrity_catches_lru_disorder() -> None:
    pool = BlockPool(3)
    pool.free_block_queue.move_to_end(0)
    pool.free_block_queue.move_to_end(2, last=False)
    with pytest.raises(AssertionError, match="LRU order"):
        pool.check_integrity()


def test_integrity_catches_allocation_that_skips_older_blocks() -> None:
    pool = BlockPool(3)
    _, block = pool.free_block_queue.popitem(last=True)  # take the newest instead of the head
    pool._newest_allocated_stamp = block.free_stamp
    block.ref_cnt = 1
    with pytest.raises(AssertionError, match="allocated before older free blocks"):
        pool.check_integrity()


def test_integrity_catches_stale_map_entry() -> None:
    pool = BlockPool(2)
    blocks = pool.get_new_blocks(1)
    [h] = _hashes(1)
    pool.cache_full_blocks(blocks, [h])
    blocks[0].block_hash = None  # evicted without removing the map entry
    with pytest.raises(AssertionError, match="hash map entry"):
        pool.check_integrity()


def test_integrity_catches_unregistered_hash() -> None:
    pool = BlockPool(2)
    [block] = pool.get_new_blocks(1)
    [block.block_hash] = _hashes(1)
    with pytest.raises(AssertionError, match="map does not give to it"):
        pool.check_integrity()


def test_reset_prefix_cache_only_when_no_block_is_held() -> None:
    pool = BlockPool(3)
    blocks = pool.get_new_blocks(2)
    hashes = _hashes(2)
    pool.cache_full_blocks(blocks, hashes)
    assert not pool.reset_prefix_cache()  # held: nothing forgotten
    assert pool.get_cached_block(hashes[0]) is blocks[0]
    pool.free_blocks(reversed(blocks))
    order = list(pool.free_block_queue)
    assert pool.reset_prefix_cache()
    assert pool.get_cached_block(hashes[0]) is None and pool.get_cached_block(hashes[1]) is None
    assert all(b.block_hash is None for b in pool.blocks)
    assert list(pool.free_block_queue) == order
    pool.check_integrity()
