"""The invariant, stated once, as named conjuncts over `State` (both interpretations).

  logical_prefix  every slot a running request's table maps a computed position (i, o) to
                  holds that request's prefix value PV(r, i, o) (its tokens 0..p, nothing else)
  cached_content  a cached block holds the prefix values of the whole prefix its hash stands
                  for: the hash is some request's chained hash of block i and the slots hold
                  that request's PV(., i, o) for every offset o
  hash_identifies a request's chained hash of block i decodes to the chain of all its blocks
                  0..i (so equal hashes mean equal whole prefixes, given collision freedom)
  chain           F[r][i] = link(F[r][i-1], tokens of block i) for r's full blocks
  hash_map        the map and the blocks' hashes agree (one block per hash, one hash a block;
                  block ids are >= 0, so NO_BLOCK is never a block)
  table_cache     a cached block in a table sits inside the computed prefix and carries the
                  table owner's hash of that index
  free_iff_unref  ref_cnt >= 0 and a block is in the free queue iff its ref_cnt is 0
  exclusive       an uncached block in a table has ref_cnt 1 (written blocks are never shared)
  last_token      a running request with every token computed had its last row computed (a
                  prefix hit never covers a request's last token)
  tables          tables and their ghost inverse agree (no block twice in one table), tables
                  hold block ids >= 0 and cover the computed tokens; waiting / finished requests hold no blocks
  tokens, shape   tokens are >= 0 inside the sequence and PAD outside; position pairs are
                  well formed; 0 <= computed <= length

Reference counts (`ref_cnt == number of tables holding the block`) are a sum over all
requests, which first-order logic does not state directly; they are proved by a frame
obligation per transition (`refcount_frame`): a transition changes at most one table, and
each block's ref_cnt changes by exactly the change of that table's membership. Two facts
about such sums of 0/1 terms are used as lemmas in every pre-state (`sum_lemmas`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from samebits.analysis.engine_proof.logic import NO_BLOCK, PAD
from samebits.analysis.engine_proof.state import (
    NOT_ARRIVED,
    RUNNING,
    WAITING,
    State,
    block_tokens,
    computed,
    eq2,
    held,
    le2,
    length,
    lt2,
    prefix_value,
)


def _in_block(L: Any, o: Any) -> Any:
    return L.and_(o >= 0, o < L.B)


def shape(L: Any, s: State) -> Any:
    def one(r: Any) -> Any:
        st = s.st[r]
        return L.and_(
            L.or_(*(st == k for k in range(4))),
            s.li[r] >= 0,
            _in_block(L, s.lo[r]),
            s.ci[r] >= 0,
            _in_block(L, s.co[r]),
            le2(L, computed(s, r), length(s, r)),
            L.implies(L.or_(st == NOT_ARRIVED, st == WAITING), eq2(L, computed(s, r), (0, 0))),
            L.implies(st != NOT_ARRIVED, lt2(L, (0, 0), length(s, r))),
        )

    return L.forall(("req",), one)


def tokens(L: Any, s: State) -> Any:
    def one(r: Any, i: Any, o: Any) -> Any:
        inside = L.and_(i >= 0, _in_block(L, o), lt2(L, (i, o), length(s, r)))
        t = s.tok[r][i][o]
        return L.ite(inside, t >= 0, t == PAD)

    return L.forall(("req", "idx", "off"), one)


def tables(L: Any, s: State) -> Any:
    def entry(r: Any, i: Any) -> Any:
        b = s.tab[r][i]
        return L.implies(L.and_(i >= 0, i < s.nb[r]), L.and_(b >= 0, s.pos[r][b] == i))

    def inverse(r: Any, b: Any) -> Any:
        p = s.pos[r][b]
        return L.and_(p >= -1, L.implies(p >= 0, L.and_(p < s.nb[r], s.tab[r][p] == b)))

    def size(r: Any) -> Any:
        return L.and_(
            s.nb[r] >= 0,
            L.implies(s.st[r] != RUNNING, s.nb[r] == 0),
            L.implies(s.st[r] == RUNNING, le2(L, computed(s, r), (s.nb[r], 0))),
        )

    return L.and_(
        L.forall(("req", "idx"), entry), L.forall(("req", "blk"), inverse), L.forall(("req",), size)
    )


def free_iff_unref(L: Any, s: State) -> Any:
    return L.forall(("blk",), lambda b: L.and_(s.ref[b] >= 0, s.free[b] == (s.ref[b] == 0)))


def exclusive(L: Any, s: State) -> Any:
    return L.forall(
        ("req", "blk"),
        lambda r, b: L.implies(L.and_(held(s, r, b), L.not_(s.cached[b])), s.ref[b] == 1),
    )


def chain(L: Any, s: State) -> Any:
    def one(r: Any, i: Any) -> Any:
        step = s.F[r][i] == L.link(s.F[r][i - 1], block_tokens(L, s.tok[r][i]))
        return L.implies(L.and_(i >= 0, i < s.li[r]), step)

    root = L.forall(("req",), lambda r: s.F[r][-1] == L.root)
    return L.and_(root, L.forall(("req", "idx"), one))


def hash_identifies(L: Any, s: State) -> Any:
    def one(r: Any, i: Any) -> Any:
        inside = L.and_(i >= -1, i < s.li[r])
        return L.implies(inside, L.decode(s.H[r][i]) == s.F[r][i])

    return L.forall(("req", "idx"), one)


def hash_map(L: Any, s: State) -> Any:
    def entry(h: Any) -> Any:
        b = s.hmap[h]
        return L.implies(b != NO_BLOCK, L.and_(s.cached[b], s.hsh[b] == h))

    def block(b: Any) -> Any:
        return L.implies(s.cached[b], L.and_(b >= 0, s.hmap[s.hsh[b]] == b))

    return L.and_(L.forall(("hash",), entry), L.forall(("blk",), block))


def cached_content(L: Any, s: State) -> Any:
    def one(b: Any, o: Any) -> Any:
        r, i = s.own_r[b], s.own_i[b]
        slot = L.implies(_in_block(L, o), s.kv[b][o] == prefix_value(L, s, r, i, o))
        whole = L.and_(i >= 0, i < s.li[r], s.hsh[b] == s.H[r][i], slot)
        return L.implies(s.cached[b], whole)

    return L.forall(("blk", "off"), one)


def table_cache(L: Any, s: State) -> Any:
    def one(r: Any, b: Any) -> Any:
        i = s.pos[r][b]
        inside = L.and_(le2(L, (i + 1, 0), computed(s, r)), s.hsh[b] == s.H[r][i])
        return L.implies(L.and_(held(s, r, b), s.cached[b]), inside)

    return L.forall(("req", "blk"), one)


def logical_prefix(L: Any, s: State) -> Any:
    def one(r: Any, i: Any, o: Any) -> Any:
        done = L.and_(i >= 0, _in_block(L, o), lt2(L, (i, o), computed(s, r)))
        slot = s.kv[s.tab[r][i]][o] == prefix_value(L, s, r, i, o)
        return L.implies(L.and_(s.st[r] == RUNNING, done), slot)

    return L.forall(("req", "idx", "off"), one)


def last_token(L: Any, s: State) -> Any:
    def one(r: Any) -> Any:
        all_done = eq2(L, computed(s, r), length(s, r))
        return L.implies(L.and_(s.st[r] == RUNNING, all_done), s.rowc[r])

    return L.forall(("req",), one)


PARTS: dict[str, Callable[[Any, State], Any]] = {
    "shape": shape,
    "tokens": tokens,
    "tables": tables,
    "free_iff_unref": free_iff_unref,
    "exclusive": exclusive,
    "chain": chain,
    "hash_identifies": hash_identifies,
    "hash_map": hash_map,
    "cached_content": cached_content,
    "table_cache": table_cache,
    "logical_prefix": logical_prefix,
    "last_token": last_token,
}


def invariant(L: Any, s: State) -> dict[str, Any]:
    """Every conjunct of the invariant, by name."""
    return {name: part(L, s) for name, part in PARTS.items()}


def sum_lemmas(L: Any, s: State) -> Any:
    """Consequences of `ref[b] == sum over r of held(r, b)` (each term 0 or 1): a held block
    has ref >= 1, a block held by two requests has ref >= 2."""
    one = L.forall(("req", "blk"), lambda r, b: L.implies(held(s, r, b), s.ref[b] >= 1))
    two = L.forall(
        ("req", "req", "blk"),
        lambda r, q, b: L.implies(L.and_(r != q, held(s, r, b), held(s, q, b)), s.ref[b] >= 2),
    )
    return L.and_(one, two)


def refcount_frame(L: Any, pre: State, post: State, r0: Any) -> Any:
    """ref_cnt == number of holding tables is preserved: only r0's table membership changes,
    and each block's ref_cnt changes by exactly r0's membership change."""

    def bit(s: State, r: Any, b: Any) -> Any:
        return L.ite(held(s, r, b), 1, 0)

    others = L.forall(
        ("req", "blk"),
        lambda r, b: L.implies(r != r0, held(post, r, b) == held(pre, r, b)),
    )
    delta = L.forall(
        ("blk",),
        lambda b: post.ref[b] - pre.ref[b] == bit(post, r0, b) - bit(pre, r0, b),
    )
    return L.and_(others, delta)
