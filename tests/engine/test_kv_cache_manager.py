"""KVCacheManager: allocation, prefix hits (never covering the last token), caching of prompt
and generated blocks, failure without side effects, reverse-order free, check_integrity."""

from __future__ import annotations

import pytest

from samebits.engine.kv_cache_manager import KVCacheManager
from samebits.engine.request import Request


def _req(rid: str, prompt, max_tokens: int = 4) -> Request:
    return Request(rid, prompt, max_tokens=max_tokens)


def _compute(manager: KVCacheManager, request: Request, num_tokens: int) -> None:
    """Allocate and 'compute' the next `num_tokens` tokens, as one scheduler step would."""
    assert manager.allocate_slots(request, num_tokens) is not None
    request.num_computed_tokens += num_tokens
    manager.cache_blocks(request, request.num_computed_tokens)
    manager.check_integrity()


def _admit(manager: KVCacheManager, request: Request) -> int:
    """Admission as the scheduler does it: prefix lookup, then compute the rest."""
    blocks, num_hit = manager.get_computed_blocks(request)
    assert manager.allocate_slots(request, request.num_tokens - num_hit, blocks) is not None
    request.num_computed_tokens = request.num_tokens
    manager.cache_blocks(request, request.num_computed_tokens)
    manager.check_integrity()
    return num_hit


def _state(manager: KVCacheManager):
    pool = manager.block_pool
    return (
        {rid: manager.get_block_ids(rid) for rid in manager.req_to_blocks},
        [(b.ref_cnt, b.block_hash) for b in pool.blocks],
        list(pool.free_block_queue),
        dict(pool.cached_block_hash_to_block),
    )


def test_allocation_covers_tokens_in_whole_blocks() -> None:
    manager = KVCacheManager(block_size=4, num_blocks=8)
    request = _req("a", range(1, 10))
    new = manager.allocate_slots(request, 5)
    assert [b.block_id for b in new] == [0, 1]
    request.num_computed_tokens = 5
    assert manager.allocate_slots(request, 3) == []  # still inside block 1
    request.num_computed_tokens = 8
    assert [b.block_id for b in manager.allocate_slots(request, 1)] == [2]
    assert manager.get_block_ids("a") == (0, 1, 2)
    assert manager.get_block_ids("unknown") == ()


def test_allocate_rejects_bad_arguments() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=4)
    request = _req("a", [1, 2, 3])
    with pytest.raises(ValueError, match="num_new_tokens must be >= 1"):
        manager.allocate_slots(request, 0)
    with pytest.raises(ValueError, match="4 tokens to cover but it only has 3"):
        manager.allocate_slots(request, 4)
    _compute(manager, request, 2)
    hit = [manager.block_pool.blocks[3]]
    with pytest.raises(ValueError, match="only allowed on admission"):
        manager.allocate_slots(request, 1, hit)


@pytest.mark.parametrize("bad", [0, -2, None])
def test_bad_block_size(bad) -> None:
    with pytest.raises(ValueError, match="block_size"):
        KVCacheManager(block_size=bad, num_blocks=4)


def test_prefix_hit_for_a_shared_prefix() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=8)
    first = _req("a", [1, 2, 3, 4, 5])
    assert _admit(manager, first) == 0
    second = _req("b", [1, 2, 3, 4, 9, 9])
    blocks, num_hit = manager.get_computed_blocks(second)
    assert num_hit == 4
    assert [b.block_id for b in blocks] == list(manager.get_block_ids("a")[:2])
    assert _admit(manager, second) == 4
    assert [b.ref_cnt for b in manager.block_pool.blocks[:2]] == [2, 2]


def test_hit_never_covers_the_last_token() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=8)
    _admit(manager, _req("a", [1, 2, 3, 4]))
    blocks, num_hit = manager.get_computed_blocks(_req("b", [1, 2, 3, 4]))
    assert (len(blocks), num_hit) == (1, 2)
    blocks, num_hit = manager.get_computed_blocks(_req("c", [1, 2, 3, 4, 7]))
    assert (len(blocks), num_hit) == (2, 4)


def test_hit_stops_at_first_miss_and_depends_on_prefix() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=8)
    _admit(manager, _req("a", [1, 2, 3, 4, 5]))
    assert manager.get_computed_blocks(_req("b", [9, 2, 3, 4, 5])) == ([], 0)


def test_no_hits_without_prefix_caching() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=8, enable_prefix_caching=False)
    _admit(manager, _req("a", [1, 2, 3, 4, 5]))
    assert manager.get_computed_blocks(_req("b", [1, 2, 3, 4, 5])) == ([], 0)
    assert all(b.block_hash is None for b in manager.block_pool.blocks)


def test_salt_separates_caches() -> None:
    a = _req("a", [1, 2, 3])
    manager_a = KVCacheManager(block_size=2, num_blocks=4, cache_salt=b"plan-a")
    manager_b = KVCacheManager(block_size=2, num_blocks=4, cache_salt=b"plan-b")
    manager_a.update_block_hashes(a)
    b = _req("b", [1, 2, 3])
    manager_b.update_block_hashes(b)
    assert a.block_hashes[0].digest != b.block_hashes[0].digest


def test_only_computed_full_blocks_are_cached() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=8)
    request = _req("a", [1, 2, 3, 4, 5])
    _compute(manager, request, 3)
    assert manager.num_cached_blocks["a"] == 1
    assert [b.block_hash is not None for b in manager.block_pool.blocks[:2]] == [True, False]
    _compute(manager, request, 2)
    assert manager.num_cached_blocks["a"] == 2


def test_generated_tokens_join_the_cache() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=8)
    first = _req("a", [1, 2, 3])
    _admit(manager, first)
    first.append_output_token_id(7)
    first.append_output_token_id(8)
    _compute(manager, first, 1)  # computes position 3 (token 7): block [3, 7] is now full
    manager.free(first)
    other = _req("b", [1, 2, 3, 7, 8])
    blocks, num_hit = manager.get_computed_blocks(other)
    assert num_hit == 4
    assert blocks[1].block_hash.token_ids == (3, 7)


def test_failed_allocation_changes_nothing() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=4)
    holder = _req("a", [1, 2, 3, 4, 5])
    _admit(manager, holder)
    manager.free(holder)
    big = _req("b", [1, 2, 3, 4, 6, 6, 6, 6, 6, 6])
    _admit(manager, _req("c", [5, 5, 5]))  # holds 2 blocks, evicting a's tail
    blocks, num_hit = manager.get_computed_blocks(big)
    before = _state(manager)
    assert manager.allocate_slots(big, big.num_tokens - num_hit, blocks) is None
    assert _state(manager) == before
    manager.check_integrity()


def test_free_hit_blocks_count_against_free_blocks() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=3)
    first = _req("a", [1, 2, 3, 4, 5])
    _admit(manager, first)
    manager.free(first)  # 3 free blocks, two of them cached
    second = _req("b", [1, 2, 3, 4, 6, 6])
    blocks, num_hit = manager.get_computed_blocks(second)
    assert num_hit == 4
    assert manager.allocate_slots(second, 2, blocks) is not None  # 2 hits + 1 new = 3 blocks
    second.num_computed_tokens = num_hit
    assert manager.num_free_blocks == 0
    manager.check_integrity()
    manager.free(second)
    third = _req("c", [1, 2, 3, 4, 7, 7, 7, 7])
    blocks, num_hit = manager.get_computed_blocks(third)
    assert num_hit == 4
    assert manager.allocate_slots(third, 4, blocks) is None  # needs 4 blocks, only 3 exist


def test_free_releases_tail_first() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=4)
    request = _req("a", [1, 2, 3, 4, 5])
    _admit(manager, request)
    manager.free(request)
    assert list(manager.block_pool.free_block_queue) == [3, 2, 1, 0]
    assert manager.get_block_ids("a") == ()
    manager.check_integrity()


def test_integrity_catches_table_that_misses_computed_tokens() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=4)
    request = _req("a", [1, 2, 3, 4, 5])
    _compute(manager, request, 2)
    request.num_computed_tokens = 3
    with pytest.raises(AssertionError, match="does not cover 3 computed tokens"):
        manager.check_integrity()


def test_integrity_catches_ref_cnt_mismatch() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=4)
    request = _req("a", [1, 2, 3, 4, 5])
    _compute(manager, request, 2)
    manager.block_pool.blocks[0].ref_cnt = 2
    with pytest.raises(AssertionError, match="ref_cnt 2 but 1 block tables hold it"):
        manager.check_integrity()


def test_integrity_catches_duplicate_block_in_table() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=4)
    request = _req("a", [1, 2, 3, 4, 5])
    _compute(manager, request, 2)
    table = manager.req_to_blocks["a"]
    table.append(table[0])
    table[0].ref_cnt += 1
    with pytest.raises(AssertionError, match="appears twice"):
        manager.check_integrity()


def test_integrity_catches_block_with_foreign_hash() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=6)
    a = _req("a", [1, 2, 3, 4, 5])
    _admit(manager, a)
    b = _req("b", [3, 4, 1, 2, 5])
    _admit(manager, b)
    # Swap the two requests' first blocks' hashes in the pool (a stale registration).
    block_a, block_b = manager.req_to_blocks["a"][0], manager.req_to_blocks["b"][0]
    block_a.block_hash, block_b.block_hash = block_b.block_hash, block_a.block_hash
    pool = manager.block_pool
    pool.cached_block_hash_to_block[block_a.block_hash.digest] = block_a
    pool.cached_block_hash_to_block[block_b.block_hash.digest] = block_b
    with pytest.raises(AssertionError, match="not the request's block 0 hash"):
        manager.check_integrity()


def test_integrity_catches_table_beyond_known_tokens() -> None:
    manager = KVCacheManager(block_size=2, num_blocks=6)
    request = _req("a", [1, 2, 3])
    _compute(manager, request, 2)
    extra = manager.block_pool.get_new_blocks(2)
    manager.req_to_blocks["a"].extend(extra)
    with pytest.raises(AssertionError, match="exceeds its 3 tokens"):
        manager.check_integrity()
