"""Two interpretations of one vocabulary, so the protocol is written once.

`Z3Logic` builds Z3 terms: requests, blocks, block indices, offsets and tokens are unbounded
integers, maps are Z3 arrays, prefix values and block chains are Z3 datatypes, hashes an
uninterpreted sort. `PyLogic` evaluates the same definitions on concrete Python values: maps
are `FMap`s (total functions with finite overrides), datatypes are tuples, and `forall`
ranges over finite domains supplied by the caller (the refinement check's bounds).

Shared definitions (`state.py`, `transitions.py`, `invariant.py`) never branch on Python
truth of a formula: they combine formulas only through `and_`, `or_`, `not_`, `implies`,
`ite`, `forall`, `lam`, `store` and the constructors below, so either interpretation gives
the same meaning.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import z3

PAD = -1  # the token of a slot beyond a sequence's end (real tokens are >= 0)
NO_BLOCK = -1  # "no block": an empty hash-map entry, a block not in a table
KINDS = ("req", "blk", "idx", "off", "tok", "hash")


class FMap:
    """A total function (concrete counterpart of a Z3 array): `fn` for every key, with
    `store` returning a new map that differs at one key. Immutable."""

    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def __getitem__(self, key: Any) -> Any:
        return self.fn(key)

    def store(self, key: Any, value: Any) -> FMap:
        old = self.fn
        return FMap(lambda k: value if k == key else old(k))

    @staticmethod
    def const(value: Any) -> FMap:
        return FMap(lambda _k: value)

    @staticmethod
    def of(table: Mapping[Any, Any], default: Any) -> FMap:
        """The map that is `table` on its keys and `default` elsewhere."""
        frozen = dict(table)
        return FMap(lambda k: frozen.get(k, default))


class Z3Logic:
    """Z3 terms. `block_size=None` makes the block size a symbolic constant `B >= 1`."""

    concrete = False

    def __init__(self, block_size: int | None = None) -> None:
        self.B = z3.Int("B") if block_size is None else block_size
        self.axioms: list[z3.BoolRef] = [] if block_size is not None else [self.B >= 1]
        vocabulary = _vocabulary()
        self.I, self.Blk, self.Chain, self.Val, self.Hash = vocabulary[:5]
        self.hash_root, self.ch, self.dec, self.trunc = vocabulary[5:]
        self.root = self.Chain.root
        self._sorts = {"hash": self.Hash}
        self._names = itertools.count()

    # -- datatypes
    def link(self, prev: Any, blk: Any) -> Any:
        return self.Chain.link(prev, blk)

    def pv(self, chain: Any, part: Any) -> Any:
        return self.Val.pv(chain, part)

    def junk(self, r: Any, i: Any, o: Any) -> Any:
        return self.Val.junk(r, i, o)

    def chain_hash(self, parent: Any, blk: Any) -> Any:
        return self.ch(parent, blk)

    def decode(self, h: Any) -> Any:
        return self.dec(h)

    def truncate(self, blk: Any, o: Any) -> Any:
        """The block's tokens at offsets 0..o, PAD elsewhere (defined pointwise by an axiom)."""
        return self.trunc(blk, o)

    # -- connectives
    def and_(self, *xs: Any) -> Any:
        return z3.And(*xs) if xs else z3.BoolVal(True)

    def or_(self, *xs: Any) -> Any:
        return z3.Or(*xs) if xs else z3.BoolVal(False)

    def not_(self, x: Any) -> Any:
        return z3.Not(x)

    def implies(self, a: Any, b: Any) -> Any:
        return z3.Implies(a, b)

    def ite(self, c: Any, a: Any, b: Any) -> Any:
        return z3.If(c, a, b)

    def store(self, m: Any, k: Any, v: Any) -> Any:
        return z3.Store(m, k, v)

    def const_map(self, kind: str, value: Any) -> Any:
        return z3.K(self.sort(kind), value)

    def sort(self, kind: str) -> z3.SortRef:
        return self._sorts.get(kind, self.I)

    def fresh(self, kind: str, name: str) -> Any:
        """A constant with a name unique in this logic (deterministic, unlike FreshConst, so
        Z3 sees the same problem in every run)."""
        return z3.Const(f"{name}!{next(self._names)}", self.sort(kind))

    def forall(self, kinds: Iterable[str], body: Callable[..., Any]) -> Any:
        xs = [self.fresh(k, k) for k in kinds]
        return z3.ForAll(xs, body(*xs))

    def lam(self, kind: str, body: Callable[[Any], Any]) -> Any:
        x = self.fresh(kind, kind)
        return z3.Lambda([x], body(x))


@functools.cache
def _vocabulary() -> tuple[Any, ...]:
    """Sorts and symbols, declared once per process: Int, Blk (offset -> token), the Chain
    and Val datatypes, the Hash sort, ROOT, CH (chained hash), Dec (its decoder), Trunc."""
    integer = z3.IntSort()
    blk = z3.ArraySort(integer, integer)
    chain = z3.Datatype("Chain")
    chain.declare("root")
    chain.declare("link", ("prev", chain), ("blk", blk))
    chain_sort = chain.create()
    val = z3.Datatype("Val")
    val.declare("pv", ("chain", chain_sort), ("part", blk))
    val.declare("junk", ("jr", integer), ("ji", integer), ("jo", integer))
    val_sort = val.create()
    hash_sort = z3.DeclareSort("Hash")
    return (
        integer,
        blk,
        chain_sort,
        val_sort,
        hash_sort,
        z3.Const("ROOT", hash_sort),
        z3.Function("CH", hash_sort, blk, hash_sort),
        z3.Function("Dec", hash_sort, chain_sort),
        z3.Function("Trunc", blk, integer, blk),
    )


class PyLogic:
    """Concrete evaluation; `forall` enumerates `domains[kind]` (finite)."""

    concrete = True

    def __init__(self, block_size: int, domains: Mapping[str, Iterable[Any]]) -> None:
        self.B = block_size
        self.domains = {k: tuple(v) for k, v in domains.items()}
        self.hash_root = ("ROOT",)
        self.root = ("root",)

    def _canon(self, blk: Any) -> tuple[int, ...]:
        return tuple(blk[j] for j in range(self.B)) if isinstance(blk, FMap) else tuple(blk)

    def link(self, prev: Any, blk: Any) -> Any:
        return ("link", prev, self._canon(blk))

    def pv(self, chain: Any, part: Any) -> Any:
        return ("pv", chain, self._canon(part))

    def junk(self, r: Any, i: Any, o: Any) -> Any:
        return ("junk", r, i, o)

    def chain_hash(self, parent: Any, blk: Any) -> Any:
        return ("CH", parent, self._canon(blk))

    def truncate(self, blk: Any, o: Any) -> tuple[int, ...]:
        return tuple(blk[j] if j <= o else PAD for j in range(self.B))

    def decode(self, h: Any) -> Any:
        """The collision-free hash's decoder on concrete terms (`Dec` of the trusted base)."""
        if h == self.hash_root:
            return self.root
        if isinstance(h, tuple) and h and h[0] == "CH":
            return ("link", self.decode(h[1]), h[2])
        return ("undecodable", h)

    def and_(self, *xs: Any) -> bool:
        return all(xs)

    def or_(self, *xs: Any) -> bool:
        return any(xs)

    def not_(self, x: Any) -> bool:
        return not x

    def implies(self, a: Any, b: Any) -> bool:
        return (not a) or bool(b)

    def ite(self, c: Any, a: Any, b: Any) -> Any:
        return a if c else b

    def store(self, m: FMap, k: Any, v: Any) -> FMap:
        return m.store(k, v)

    def const_map(self, kind: str, value: Any) -> FMap:
        return FMap.const(value)

    def forall(self, kinds: Iterable[str], body: Callable[..., Any]) -> bool:
        domains = [self.domains[k] for k in kinds]
        return all(body(*xs) for xs in itertools.product(*domains))

    def lam(self, kind: str, body: Callable[[Any], Any]) -> FMap:
        return FMap(body)
