"""The protocol's transitions: each a guard and an update over `State`, written once for both
interpretations (`logic.py`). A real engine action is a sequence of these (`refinement.py`).

Every transition changes the block table of at most one request, its first `req` parameter
(`Transition.table_owner`); the reference-count obligation relies on that.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from samebits.analysis.engine_proof.logic import NO_BLOCK
from samebits.analysis.engine_proof.state import (
    FINISHED,
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

Step = Callable[..., tuple[Any, State]]


@dataclass(frozen=True)
class Transition:
    """`step(L, s, *args) -> (guard, post)`; `params` name and kind each argument."""

    name: str
    params: tuple[tuple[str, str], ...]
    step: Step

    @property
    def table_owner(self) -> int | None:
        """Index of the parameter whose table may change (the first request), if any."""
        kinds = [kind for _, kind in self.params]
        return kinds.index("req") if "req" in kinds else None


# ---------------------------------------------------------------------- tokens


def append_token(L: Any, s: State, r: Any, t: Any, chain_hash: Callable | None = None) -> State:
    """Append token t at r's end; a block that becomes full gets its chain and chained hash."""
    chain_hash = chain_hash or L.chain_hash
    li, lo = length(s, r)
    blk = L.store(s.tok[r][li], lo, t)
    full = lo + 1 == L.B
    content = block_tokens(L, blk)
    chain = L.ite(full, L.link(s.F[r][li - 1], content), s.F[r][li])
    digest = L.ite(full, chain_hash(s.H[r][li - 1], content), s.H[r][li])
    return s.with_(
        tok=L.store(s.tok, r, L.store(s.tok[r], li, blk)),
        li=L.store(s.li, r, L.ite(full, li + 1, li)),
        lo=L.store(s.lo, r, L.ite(full, 0, lo + 1)),
        F=L.store(s.F, r, L.store(s.F[r], li, chain)),
        H=L.store(s.H, r, L.store(s.H[r], li, digest)),
        rowc=L.store(s.rowc, r, False),
    )


def prompt_token(L: Any, s: State, r: Any, t: Any) -> tuple[Any, State]:
    """Arrival, one prompt token at a time (any prompt length): r has not arrived yet."""
    return L.and_(s.st[r] == NOT_ARRIVED, t >= 0), append_token(L, s, r, t)


def arrive(L: Any, s: State, r: Any) -> tuple[Any, State]:
    """The request (non-empty prompt) joins the waiting queue."""
    guard = L.and_(s.st[r] == NOT_ARRIVED, lt2(L, (0, 0), length(s, r)))
    return guard, s.with_(st=L.store(s.st, r, WAITING))


def decode_append(L: Any, s: State, r: Any, t: Any) -> tuple[Any, State]:
    """A sampled token joins r: every token is computed and the sampled row was computed."""
    guard = L.and_(s.st[r] == RUNNING, eq2(L, computed(s, r), length(s, r)), s.rowc[r], t >= 0)
    return guard, append_token(L, s, r, t)


# ---------------------------------------------------------------------- admission, blocks


def admit(L: Any, s: State, r: Any) -> tuple[Any, State]:
    """A waiting request starts running (no blocks, nothing computed yet)."""
    post = s.with_(st=L.store(s.st, r, RUNNING), rowc=L.store(s.rowc, r, False))
    return s.st[r] == WAITING, post


def _push_block(L: Any, s: State, r: Any, b: Any) -> State:
    """Append b to r's table and take a reference on it (it leaves the free queue)."""
    n = s.nb[r]
    return s.with_(
        tab=L.store(s.tab, r, L.store(s.tab[r], n, b)),
        nb=L.store(s.nb, r, n + 1),
        pos=L.store(s.pos, r, L.store(s.pos[r], b, n)),
        ref=L.store(s.ref, b, s.ref[b] + 1),
        free=L.store(s.free, b, False),
    )


def hit_guard(L: Any, s: State, r: Any, b: Any, covers_last: bool = False) -> Any:
    """Prefix-cache lookup of r's next block: r's table so far is its computed prefix, that
    block is full, its chained hash is in the map under b, and (unless `covers_last`, a
    mutant) at least one token stays to compute: a hit never covers the last token."""
    n = s.nb[r]
    after = (n + 1, 0)
    leaves = le2(L, after, length(s, r)) if covers_last else lt2(L, after, length(s, r))
    return L.and_(
        s.st[r] == RUNNING,
        eq2(L, computed(s, r), (n, 0)),
        n < s.li[r],
        leaves,
        b != NO_BLOCK,
        s.hmap[s.H[r][n]] == b,
        s.pos[r][b] == -1,
    )


def hit(L: Any, s: State, r: Any, b: Any) -> tuple[Any, State]:
    """A prefix hit: the cached block b joins r's table and its tokens count as computed."""
    post = _push_block(L, s, r, b)
    n = s.nb[r]
    post = post.with_(ci=L.store(s.ci, r, n + 1), co=L.store(s.co, r, 0))
    return hit_guard(L, s, r, b), post


def allocate(L: Any, s: State, r: Any, b: Any) -> tuple[Any, State]:
    """A free, uncached block joins r's table (within r's tokens) with ref_cnt 1."""
    guard = L.and_(
        s.st[r] == RUNNING,
        b >= 0,
        s.free[b],
        L.not_(s.cached[b]),
        s.pos[r][b] == -1,
        lt2(L, (s.nb[r], 0), length(s, r)),
    )
    return guard, _push_block(L, s, r, b)


def evict(L: Any, s: State, b: Any) -> tuple[Any, State]:
    """A free cached block leaves the prefix cache (its content may now be overwritten)."""
    post = s.with_(cached=L.store(s.cached, b, False), hmap=L.store(s.hmap, s.hsh[b], NO_BLOCK))
    return L.and_(s.free[b], s.cached[b]), post


# ---------------------------------------------------------------------- KV writes, caching


def written(L: Any, s: State, r: Any, end: tuple[Any, Any], b: Any, o: Any) -> Any:
    """Slot (b, o) is one of r's positions in [num_computed, end)."""
    i = s.pos[r][b]
    return L.and_(i >= 0, o >= 0, o < L.B, le2(L, computed(s, r), (i, o)), lt2(L, (i, o), end))


def reads_ok(L: Any, s: State, r: Any) -> Any:
    """Every computed position of r, read through its table, holds r's prefix value."""
    return L.forall(
        ("idx", "off"),
        lambda i, o: L.implies(
            L.and_(i >= 0, o >= 0, o < L.B, lt2(L, (i, o), computed(s, r))),
            s.kv[s.tab[r][i]][o] == prefix_value(L, s, r, i, o),
        ),
    )


def write_guard(L: Any, s: State, r: Any, end: tuple[Any, Any]) -> Any:
    """A chunk [num_computed, end): non-empty, within r's tokens and table, and every block
    it writes is held by r alone and not in the prefix cache (cached blocks are immutable)."""
    ei, eo = end
    return L.and_(
        s.st[r] == RUNNING,
        eo >= 0,
        eo < L.B,
        lt2(L, computed(s, r), end),
        le2(L, end, length(s, r)),
        le2(L, end, (s.nb[r], 0)),
        L.forall(
            ("idx",),
            lambda i: L.implies(
                L.and_(s.ci[r] <= i, lt2(L, (i, 0), end)),
                L.and_(s.ref[s.tab[r][i]] == 1, L.not_(s.cached[s.tab[r][i]])),
            ),
        ),
    )


def write(L: Any, s: State, r: Any, ei: Any, eo: Any) -> tuple[Any, State]:
    """The runner computes r's chunk [num_computed, (ei, eo)) of any length. Kernel
    assumption: if every slot the chunk reads before it holds r's prefix value, each written
    slot gets r's prefix value of its own position; otherwise an arbitrary (junk) value."""
    end = (ei, eo)
    ok = reads_ok(L, s, r)

    def value(b: Any, o: Any) -> Any:
        i = s.pos[r][b]
        new = L.ite(ok, prefix_value(L, s, r, i, o), L.junk(r, i, o))
        return L.ite(written(L, s, r, end, b, o), new, s.kv[b][o])

    post = s.with_(
        kv=L.lam("blk", lambda b: L.lam("off", lambda o: value(b, o))),
        ci=L.store(s.ci, r, ei),
        co=L.store(s.co, r, eo),
        rowc=L.store(s.rowc, r, eq2(L, end, length(s, r))),
    )
    return write_guard(L, s, r, end), post


def cache_guard(L: Any, s: State, r: Any, i: Any, partial: bool = False) -> Any:
    """Block i of r's table is complete (every token computed; `partial`: a mutant that only
    needs one) and uncached, and its hash is not in the map yet."""
    b = s.tab[r][i]
    done = lt2(L, (i, 0), computed(s, r)) if partial else le2(L, (i + 1, 0), computed(s, r))
    return L.and_(
        s.st[r] == RUNNING,
        i >= 0,
        i < s.nb[r],
        done,
        L.not_(s.cached[b]),
        s.hmap[s.H[r][i]] == NO_BLOCK,
    )


def cache(L: Any, s: State, r: Any, i: Any) -> tuple[Any, State]:
    """Block completion: register block i of r under r's chained hash of block i."""
    b, h = s.tab[r][i], s.H[r][i]
    post = s.with_(
        cached=L.store(s.cached, b, True),
        hsh=L.store(s.hsh, b, h),
        hmap=L.store(s.hmap, h, b),
        own_r=L.store(s.own_r, b, r),
        own_i=L.store(s.own_i, b, i),
    )
    return cache_guard(L, s, r, i), post


# ---------------------------------------------------------------------- free, status


def release(L: Any, s: State, r: Any, keep_referenced: bool = True) -> State:
    """Free r's table: one reference less on each of its blocks; a block left with no
    reference joins the free queue (`keep_referenced=False`: a mutant that frees every block
    of the table, referenced elsewhere or not)."""

    def ref(b: Any) -> Any:
        return s.ref[b] - L.ite(held(s, r, b), 1, 0)

    def free(b: Any) -> Any:
        back = held(s, r, b) if not keep_referenced else L.and_(held(s, r, b), ref(b) == 0)
        return L.or_(s.free[b], back)

    return s.with_(
        ref=L.lam("blk", ref),
        free=L.lam("blk", free),
        pos=L.store(s.pos, r, L.const_map("blk", -1)),
        nb=L.store(s.nb, r, 0),
    )


def preempt(L: Any, s: State, r: Any) -> tuple[Any, State]:
    """Preemption by recompute: r frees its blocks, forgets its progress and waits again."""
    post = release(L, s, r).with_(
        st=L.store(s.st, r, WAITING),
        ci=L.store(s.ci, r, 0),
        co=L.store(s.co, r, 0),
        rowc=L.store(s.rowc, r, False),
    )
    return s.st[r] == RUNNING, post


def abort(L: Any, s: State, r: Any) -> tuple[Any, State]:
    """A waiting or running request is aborted (or stopped from outside) and frees its blocks."""
    guard = L.or_(s.st[r] == WAITING, s.st[r] == RUNNING)
    return guard, release(L, s, r).with_(st=L.store(s.st, r, FINISHED))


def finish(L: Any, s: State, r: Any) -> tuple[Any, State]:
    """A running request finishes (stop token, length) and frees its blocks."""
    return s.st[r] == RUNNING, release(L, s, r).with_(st=L.store(s.st, r, FINISHED))


REQ, BLK, IDX, OFF, TOK = (("r", "req"),), ("b", "blk"), ("i", "idx"), ("o", "off"), ("t", "tok")

TRANSITIONS: tuple[Transition, ...] = (
    Transition("prompt_token", (*REQ, TOK), prompt_token),
    Transition("arrive", REQ, arrive),
    Transition("admit", REQ, admit),
    Transition("hit", (*REQ, BLK), hit),
    Transition("allocate", (*REQ, BLK), allocate),
    Transition("evict", (BLK,), evict),
    Transition("write", (*REQ, IDX, OFF), write),
    Transition("cache", (*REQ, IDX), cache),
    Transition("decode_append", (*REQ, TOK), decode_append),
    Transition("preempt", REQ, preempt),
    Transition("abort", REQ, abort),
    Transition("finish", REQ, finish),
)

BY_NAME = {t.name: t for t in TRANSITIONS}
