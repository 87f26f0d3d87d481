"""Planted protocol bugs: each replaces one or more transitions by a faulty version. The
proof must fail on each (some obligation not proved, with a bounded counterexample).

Real-code counterparts (monkeypatched into the engine) are checked by the refinement check
in the tests; see docs/engine_proof.md for the table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from samebits.analysis.engine_proof import transitions as tr
from samebits.analysis.engine_proof.state import State


@dataclass(frozen=True)
class Mutant:
    """`replaces` maps transition names to faulty steps; `expect` names an obligation
    (`transition/part`) that must fail."""

    name: str
    description: str
    replaces: dict[str, tr.Step]
    expect: str

    def transitions(self) -> tuple[tr.Transition, ...]:
        return tuple(
            replace(t, step=self.replaces[t.name]) if t.name in self.replaces else t
            for t in tr.TRANSITIONS
        )


def _hit_covers_last(L: Any, s: State, r: Any, b: Any) -> tuple[Any, State]:
    _, post = tr.hit(L, s, r, b)
    return tr.hit_guard(L, s, r, b, covers_last=True), post


def _hit_unreferenced(L: Any, s: State, r: Any, b: Any) -> tuple[Any, State]:
    guard, post = tr.hit(L, s, r, b)
    return guard, post.with_(ref=s.ref)


def _allocate_cached(L: Any, s: State, r: Any, b: Any) -> tuple[Any, State]:
    _, post = tr.allocate(L, s, r, b)
    guard = L.and_(s.st[r] == tr.RUNNING, b >= 0, s.free[b], s.pos[r][b] == -1)
    return guard, post  # the block keeps its hash and map entry (no eviction)


def _cache_partial(L: Any, s: State, r: Any, i: Any) -> tuple[Any, State]:
    _, post = tr.cache(L, s, r, i)
    return tr.cache_guard(L, s, r, i, partial=True), post


def _release_referenced(step: Callable) -> tr.Step:
    def faulty(L: Any, s: State, r: Any) -> tuple[Any, State]:
        guard, post = step(L, s, r)
        return guard, post.with_(free=tr.release(L, s, r, keep_referenced=False).free)

    return faulty


def _unchained(L: Any, s: State, r: Any, t: Any, status: Any) -> tuple[Any, State]:
    def hash_of_block_alone(parent: Any, blk: Any) -> Any:
        return L.chain_hash(L.hash_root, blk)

    guard = L.and_(s.st[r] == status, t >= 0)
    return guard, tr.append_token(L, s, r, t, chain_hash=hash_of_block_alone)


MUTANTS: tuple[Mutant, ...] = (
    Mutant(
        "hit-covers-last-token",
        "a prefix hit may cover the request's last token",
        {"hit": _hit_covers_last},
        "hit/last_token",
    ),
    Mutant(
        "freed-while-referenced",
        "freeing a table puts every block in the free queue, referenced elsewhere or not",
        {"finish": _release_referenced(tr.finish), "abort": _release_referenced(tr.abort)},
        "finish/free_iff_unref",
    ),
    Mutant(
        "cached-before-written",
        "a block is hashed and cached once its first token is computed, not all of them",
        {"cache": _cache_partial},
        "cache/cached_content",
    ),
    Mutant(
        "hash-not-chained",
        "a block's hash covers its own tokens only, not the prefix before it",
        {"prompt_token": lambda L, s, r, t: _unchained(L, s, r, t, tr.NOT_ARRIVED)},
        "prompt_token/hash_identifies",
    ),
    Mutant(
        "reused-block-keeps-hash",
        "allocation hands out a cached free block without evicting it (checker bug b)",
        {"allocate": _allocate_cached},
        "allocate/table_cache",
    ),
    Mutant(
        "hit-not-referenced",
        "a prefix hit takes no reference on the block (checker bug g)",
        {"hit": _hit_unreferenced},
        "hit/refcount",
    ),
)
