"""Proof obligations: the invariant holds initially and every transition preserves it.

For each transition T and each conjunct k of the invariant, obligation `T/k` is
    axioms  and  Inv(pre)  and  sum_lemmas(pre)  and  guard_T(pre, args)  and  not Inv_k(post)
with pre-state and arguments fresh, unconstrained Z3 terms; `unsat` proves that T preserves
k for every state, every request, block, position and token, and any block size (when `B`
is symbolic). `T/refcount` proves the reference-count frame. `init/k` proves the initial
state satisfies k.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import z3

from samebits.analysis.engine_proof import invariant as inv
from samebits.analysis.engine_proof.logic import PAD, Z3Logic
from samebits.analysis.engine_proof.state import held, initial, z3_state
from samebits.analysis.engine_proof.transitions import TRANSITIONS, Transition


@dataclass(frozen=True)
class Obligation:
    """`name` is `transition/part`; the formula is unsatisfiable iff the obligation holds.
    `args` are the transition's arguments (for reporting a counterexample)."""

    name: str
    formula: z3.BoolRef
    args: tuple[tuple[str, Any], ...] = ()
    lemma: bool = False  # proved from the axioms only (not from the lemmas)


def axioms(L: Z3Logic) -> list[z3.BoolRef]:
    """Trusted base, as formulas: the block size is positive; the chained hash is collision
    free, stated as the existence of a decoder `Dec` that recovers the whole chain of blocks
    from a hash (Dec(ROOT) = root, Dec(CH(h, blk)) = link(Dec(h), blk))."""
    h = z3.Const("ax.h", L.Hash)
    a = z3.Const("ax.a", L.Blk)
    decode = z3.ForAll(
        [h, a],
        L.decode(L.chain_hash(h, a)) == L.link(L.decode(h), a),
        patterns=[L.chain_hash(h, a)],
    )
    o = z3.Int("ax.o")
    j = z3.Int("ax.j")
    trunc = z3.ForAll(
        [a, o, j],
        L.truncate(a, o)[j] == z3.If(z3.And(j >= 0, j <= o), a[j], PAD),
        patterns=[L.truncate(a, o)[j]],
    )
    return [*L.axioms, L.decode(L.hash_root) == L.root, decode, trunc]


def trunc_store_lemma(L: Z3Logic) -> z3.BoolRef:
    """Lemma (proved from the axioms by `lemma/trunc_store`): writing past offset o leaves
    the truncation at o unchanged, so appending a token never changes an earlier prefix."""
    a = z3.Const("lm.a", L.Blk)
    k, t, o = z3.Ints("lm.k lm.t lm.o")
    truncated = L.truncate(z3.Store(a, k, t), o)
    return z3.ForAll(
        [a, k, t, o],
        z3.Implies(o < k, truncated == L.truncate(a, o)),
        patterns=[truncated],
    )


def lemma_obligations(L: Z3Logic) -> list[Obligation]:
    """Lemmas used as hypotheses elsewhere, proved from the axioms alone."""
    a = z3.Const("lemma.a", L.Blk)
    k, t, o = z3.Ints("lemma.k lemma.t lemma.o")
    claim = L.truncate(z3.Store(a, k, t), o) == L.truncate(a, o)
    return [Obligation("lemma/trunc_store", z3.And(o < k, z3.Not(claim)), lemma=True)]


def _args(L: Z3Logic, transition: Transition) -> list[Any]:
    return [L.fresh(kind, f"{transition.name}.{name}") for name, kind in transition.params]


def initial_obligations(L: Z3Logic) -> list[Obligation]:
    s = initial(L, z3_state(L, "init"))
    out = [Obligation(f"init/{k}", z3.Not(f)) for k, f in inv.invariant(L, s).items()]
    no_refs = L.forall(("req", "blk"), lambda r, b: z3.And(z3.Not(held(s, r, b)), s.ref[b] == 0))
    return [*out, Obligation("init/refcount", z3.Not(no_refs))]


def transition_obligations(L: Z3Logic, transition: Transition) -> list[Obligation]:
    """One obligation per invariant conjunct, plus the reference-count frame."""
    pre = z3_state(L, f"{transition.name}.pre")
    args = _args(L, transition)
    guard, post = transition.step(L, pre, *args)
    hyp = [*inv.invariant(L, pre).values(), inv.sum_lemmas(L, pre), guard]
    named = tuple((name, a) for (name, _), a in zip(transition.params, args, strict=True))
    out = [
        Obligation(f"{transition.name}/{k}", z3.And(*hyp, z3.Not(f)), named)
        for k, f in inv.invariant(L, post).items()
    ]
    owner = transition.table_owner
    r0 = args[owner] if owner is not None else L.fresh("req", f"{transition.name}.r0")
    frame = inv.refcount_frame(L, pre, post, r0)
    out.append(Obligation(f"{transition.name}/refcount", z3.And(*hyp, z3.Not(frame)), named))
    return out


def all_obligations(
    L: Z3Logic, transitions: Iterable[Transition] = TRANSITIONS
) -> list[Obligation]:
    out = lemma_obligations(L) + initial_obligations(L)
    for transition in transitions:
        out += transition_obligations(L, transition)
    return out
