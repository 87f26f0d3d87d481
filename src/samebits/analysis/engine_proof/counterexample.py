"""Counterexamples for obligations that fail, by a bounded, quantifier-free encoding.

Z3 cannot build models of the unbounded obligations (collision freedom forces an infinite
hash space, and the invariant quantifies over unbounded integers), so a failing obligation
there ends "unknown" rather than "sat". `find` re-encodes one obligation over a small
universe (requests {0, 1}, blocks {0, 1, 2}, block indices {-1 .. 2}, a concrete block size):
every quantifier becomes a finite conjunction, every reference a state holds (table entries,
witnesses, map entries, arguments) is constrained to that universe, and the hash axioms are
instantiated on the hash terms the obligation builds. A model is then a concrete state of a
system with those requests and blocks that satisfies the invariant, enables the transition,
and breaks the named conjunct: a genuine counterexample.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import z3

from samebits.analysis.engine_proof import invariant as inv
from samebits.analysis.engine_proof.logic import NO_BLOCK, PAD, Z3Logic
from samebits.analysis.engine_proof.state import State, held, z3_state
from samebits.analysis.engine_proof.transitions import Transition

REQS, BLOCKS, INDICES = (0, 1), (0, 1, 2), (-1, 0, 1, 2)


class BoundedZ3Logic(Z3Logic):
    """`Z3Logic` with finite quantifiers, an explicit truncation and recorded hash terms."""

    def __init__(self, block_size: int = 2) -> None:
        super().__init__(block_size)
        self.domains = {
            "req": REQS,
            "blk": BLOCKS,
            "idx": INDICES,
            "off": tuple(range(-1, block_size + 1)),
        }
        self.hash_terms: list[Any] = []

    def forall(self, kinds: Iterable[str], body: Callable[..., Any]) -> Any:
        domains = [self.domains[k] if k != "hash" else self.hash_terms for k in kinds]
        return z3.And(*[body(*xs) for xs in itertools.product(*domains)])

    def truncate(self, blk: Any, o: Any) -> Any:
        out = z3.K(self.I, z3.IntVal(PAD))
        for j in range(self.B):
            out = z3.Store(out, j, z3.If(j <= o, blk[j], PAD))
        return out

    def lam(self, kind: str, body: Callable[[Any], Any]) -> Any:
        """The map on the universe (quantifier free); outside it, the first point's value."""
        points = self.domains[kind]
        out = z3.K(self.sort(kind), body(points[0]))
        for x in points[1:]:
            out = z3.Store(out, x, body(x))
        return out

    def chain_hash(self, parent: Any, blk: Any) -> Any:
        term = self.ch(parent, blk)
        self.hash_terms.append(term)
        return term


@dataclass(frozen=True)
class Counterexample:
    """The violated conjunct, the transition's arguments and a few pre-state facts."""

    obligation: str
    arguments: dict[str, str]
    facts: dict[str, str]

    def __str__(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.arguments.items())
        facts = "; ".join(f"{k} = {v}" for k, v in self.facts.items())
        return f"{self.obligation} fails for {args}: {facts}"


def find(transition: Transition, part: str, block_size: int = 2) -> Counterexample | None:
    """A bounded counterexample to `transition/part`, or None when there is none in bounds."""
    L = BoundedZ3Logic(block_size)
    pre = z3_state(L, f"cex.{transition.name}")
    args = [L.fresh(kind, name) for name, kind in transition.params]
    guard, post = transition.step(L, pre, *args)
    L.hash_terms += _hash_terms(L, pre) + _hash_terms(L, post)
    solver = z3.Solver()
    solver.add(*_closure(L, pre, transition, args), *_axioms(L))
    solver.add(*inv.invariant(L, pre).values(), refcount(L, pre), guard)
    goal = refcount(L, post) if part == "refcount" else inv.PARTS[part](L, post)
    solver.add(z3.Not(goal))
    if solver.check() != z3.sat:
        return None
    model = solver.model()
    names = [name for name, _ in transition.params]
    shown = {n: str(model.eval(a, model_completion=True)) for n, a in zip(names, args, strict=True)}
    return Counterexample(f"{transition.name}/{part}", shown, _facts(L, model, pre, args))


def refcount(L: BoundedZ3Logic, s: State) -> Any:
    """In the bounded universe the sum is finite: ref_cnt == number of holding tables."""
    holders = [[z3.If(held(s, r, b), 1, 0) for r in REQS] for b in BLOCKS]
    return z3.And(*(s.ref[b] == z3.Sum(*h) for b, h in zip(BLOCKS, holders, strict=True)))


def _hash_terms(L: BoundedZ3Logic, s: State) -> list[Any]:
    per_request = [s.H[r][i] for r in REQS for i in INDICES]
    return [L.hash_root, *per_request, *(s.hsh[b] for b in BLOCKS)]


def _axioms(L: BoundedZ3Logic) -> list[Any]:
    """Collision freedom on the hash terms built here (Dec of each CH application)."""
    out = [L.decode(L.hash_root) == L.root]
    for term in L.hash_terms:
        if z3.is_app_of(term, L.ch.kind()) and term.decl() == L.ch:
            parent, blk = term.arg(0), term.arg(1)
            out.append(L.decode(term) == L.link(L.decode(parent), blk))
    return out


def _closure(L: BoundedZ3Logic, s: State, transition: Transition, args: list[Any]) -> list[Any]:
    """Every reference stays inside the universe (so the model is a complete small state)."""

    def within(x: Any, values: Iterable[int]) -> Any:
        return z3.Or(*(x == v for v in values))

    out = [
        within(a, L.domains[k])
        for a, (_, k) in zip(args, transition.params, strict=True)
        if k != "tok"
    ]
    for r in REQS:
        out += [s.li[r] <= 2, s.nb[r] <= 2]
        out += [within(s.tab[r][i], BLOCKS) for i in INDICES]
        out += [within(s.pos[r][b], INDICES) for b in BLOCKS]
    for b in BLOCKS:
        out += [within(s.own_r[b], REQS), within(s.own_i[b], INDICES)]
    out += [within(s.hmap[h], (NO_BLOCK, *BLOCKS)) for h in L.hash_terms]
    return out


def _facts(L: BoundedZ3Logic, model: z3.ModelRef, s: State, args: list[Any]) -> dict[str, str]:
    def ev(x: Any) -> str:
        return str(model.eval(x, model_completion=True))

    facts = {}
    for r in REQS:
        facts[f"request {r}"] = (
            f"st {ev(s.st[r])}, length ({ev(s.li[r])},{ev(s.lo[r])}), computed "
            f"({ev(s.ci[r])},{ev(s.co[r])}), table {[ev(s.tab[r][i]) for i in range(2)]}"
            f"[:{ev(s.nb[r])}]"
        )
    for b in BLOCKS:
        facts[f"block {b}"] = f"ref {ev(s.ref[b])}, free {ev(s.free[b])}, cached {ev(s.cached[b])}"
    return facts
