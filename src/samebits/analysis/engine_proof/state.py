"""The abstract state of the engine protocol, over unbounded requests, blocks and positions.

A position is a pair `(i, o)`: block index `i` of a request's block table and offset
`0 <= o < B` inside the block (position `p = i*B + o`; pairs keep the arithmetic linear for
a symbolic block size `B`). Pairs compare lexicographically (`lt2`, `le2`).

Per request `r` (an integer; every integer is a request, most never arrive):
  st[r]            0 not arrived (prompt being received), 1 waiting, 2 running, 3 finished
  li[r], lo[r]     num_tokens as a pair;  ci[r], co[r]  num_computed_tokens as a pair
  tok[r][i][o]     the token at (i, o); PAD outside the sequence and outside 0 <= o < B
  nb[r], tab[r][i] block table: length and physical block ids
  pos[r][b]        ghost inverse of the table: the index of block b in r's table, or -1
  rowc[r]          ghost: the logits row of r's last token was computed (not cache-served)
  F[r][i]          ghost: the chain of r's full blocks 0..i (datatype link(F[r][i-1], tokens))
  H[r][i]          ghost: r's chained hash of block i (what the engine keys the cache with)
Per block `b` (an integer; any number of blocks):
  ref[b], free[b]  reference count and free-queue membership (the queue's order is policy:
                   the refinement check follows it, the proof treats the queue as a set)
  cached[b], hsh[b] registered in the prefix cache, and under which hash
  kv[b][o]         the prefix value held by slot (b, o) (Val: pv(chain, part) or junk)
  own_r[b], own_i[b] ghost witness of a cached block: a request and block index it was
                   computed for
Global: hmap[h], the prefix cache (hash -> block, NO_BLOCK when absent).

The prefix value of request r at (i, o) is `pv(F[r][i-1], tok[r][i] truncated after o)`:
an injective encoding of exactly the tokens 0..p. The kernel assumption says the K/V the
model writes for position p is a function of these tokens only, so "slot holds
PV(r, i, o)" means "slot holds what the reference computes for r's tokens 0..p".
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from samebits.analysis.engine_proof.logic import NO_BLOCK, PAD, Z3Logic

REQUEST_FIELDS = ("st", "li", "lo", "ci", "co", "nb", "tab", "pos", "rowc", "tok", "F", "H")
BLOCK_FIELDS = ("ref", "free", "cached", "hsh", "kv", "own_r", "own_i")
NOT_ARRIVED, WAITING, RUNNING, FINISHED = 0, 1, 2, 3


@dataclass(frozen=True)
class State:
    """One abstract state (fields as in the module docstring; Z3 arrays or FMaps)."""

    st: Any
    li: Any
    lo: Any
    ci: Any
    co: Any
    nb: Any
    tab: Any
    pos: Any
    rowc: Any
    tok: Any
    F: Any
    H: Any
    ref: Any
    free: Any
    cached: Any
    hsh: Any
    kv: Any
    own_r: Any
    own_i: Any
    hmap: Any

    def with_(self, **changes: Any) -> State:
        return replace(self, **changes)


def field_names() -> tuple[str, ...]:
    return tuple(f.name for f in fields(State))


def lt2(L: Any, a: tuple[Any, Any], b: tuple[Any, Any]) -> Any:
    """Lexicographic `a < b` on position pairs."""
    return L.or_(a[0] < b[0], L.and_(a[0] == b[0], a[1] < b[1]))


def le2(L: Any, a: tuple[Any, Any], b: tuple[Any, Any]) -> Any:
    return L.or_(lt2(L, a, b), L.and_(a[0] == b[0], a[1] == b[1]))


def eq2(L: Any, a: tuple[Any, Any], b: tuple[Any, Any]) -> Any:
    return L.and_(a[0] == b[0], a[1] == b[1])


def length(s: State, r: Any) -> tuple[Any, Any]:
    return (s.li[r], s.lo[r])


def computed(s: State, r: Any) -> tuple[Any, Any]:
    return (s.ci[r], s.co[r])


def held(s: State, r: Any, b: Any) -> Any:
    return s.pos[r][b] >= 0


def block_tokens(L: Any, blk: Any) -> Any:
    """A block's tokens at offsets 0..B-1 (PAD elsewhere): what chains and hashes take."""
    return L.truncate(blk, L.B - 1)


def prefix_value(L: Any, s: State, r: Any, i: Any, o: Any) -> Any:
    """PV(r, i, o): the reference value of r's tokens 0..(i, o) (see module docstring)."""
    return L.pv(s.F[r][i - 1], L.truncate(s.tok[r][i], o))


def initial(L: Any, fresh: State | None = None) -> State:
    """No request has arrived, every block is free and uncached, the cache map is empty.
    Fields without a meaning yet (tables, hashes, KV contents, witnesses) keep `fresh`'s
    arbitrary values (Z3: unconstrained arrays)."""
    base = fresh if fresh is not None else z3_state(L, "init")
    zero = L.const_map("req", 0)
    return base.with_(
        st=zero,
        li=zero,
        lo=zero,
        ci=zero,
        co=zero,
        nb=zero,
        pos=L.const_map("req", L.const_map("blk", -1)),
        rowc=L.const_map("req", False),
        tok=L.const_map("req", L.const_map("idx", L.const_map("off", PAD))),
        F=L.const_map("req", L.const_map("idx", L.root)),
        H=L.const_map("req", L.const_map("idx", L.hash_root)),
        ref=L.const_map("blk", 0),
        free=L.const_map("blk", True),
        cached=L.const_map("blk", False),
        hmap=L.const_map("hash", NO_BLOCK),
    )


def z3_state(L: Z3Logic, prefix: str) -> State:
    """A state of fresh, unconstrained Z3 arrays named `prefix.field`."""
    import z3

    In, B, Bo, Ch, Va, Ha = L.I, L.Blk, z3.BoolSort(), L.Chain, L.Val, L.Hash

    def arr(*sorts: Any) -> Any:
        out = sorts[-1]
        for dom in reversed(sorts[:-1]):
            out = z3.ArraySort(dom, out)
        return out

    sorts = {
        "st": arr(In, In), "li": arr(In, In), "lo": arr(In, In), "ci": arr(In, In),
        "co": arr(In, In), "nb": arr(In, In), "tab": arr(In, In, In), "pos": arr(In, In, In),
        "rowc": arr(In, Bo), "tok": arr(In, In, B), "F": arr(In, In, Ch), "H": arr(In, In, Ha),
        "ref": arr(In, In), "free": arr(In, Bo), "cached": arr(In, Bo), "hsh": arr(In, Ha),
        "kv": arr(In, In, Va), "own_r": arr(In, In), "own_i": arr(In, In), "hmap": arr(Ha, In),
    }  # fmt: skip
    return State(**{name: z3.Const(f"{prefix}.{name}", sort) for name, sort in sorts.items()})
