"""Solver helpers: validity and case questions asked of Z3 under a list of facts.

Concern: the only place a fact list is turned into a Z3 solver for a yes/no question (the
interpreter's forks and non-negativity checks, the prover's equalities). Invariants: an
answer is a proof (``unsat`` of the negation) or "don't know" (``None`` / ``False``), never a
guess; answers are memoized by formula with the formula kept alive.
"""

from __future__ import annotations

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.solving import staged

# The incremental solver's limit per question; a question it leaves undecided goes to a fresh
# solver (FRESH_TIMEOUT_MS). Measured (2026-12-04): the non-linear index equalities of the
# split-grid proofs (``STEPS * x == STEPS * y`` given ``x == y``) run the incremental solver
# into its limit while a fresh one answers in milliseconds, so a long first limit only waits.
INCREMENTAL_TIMEOUT_MS = 2000
FRESH_TIMEOUT_MS = 60000
# the fresh solvers' stages (`solving.staged`: each arithmetic engine briefly, then long; the
# last through `solving.check`, its retry)
FRESH_TRIES = ((2, 1000), (None, 2000), (2, 10000), (None, FRESH_TIMEOUT_MS))


class Oracle:
    """Validity questions under a fixed list of facts, memoized."""

    def __init__(self, facts: list):
        self.solver = z3.Solver()
        self.solver.set("timeout", INCREMENTAL_TIMEOUT_MS)
        for f in facts:
            self.solver.add(f)
        self.cache: dict = {}

    def valid(self, f) -> bool:
        # keyed by the AST id, the formula kept alive with the answer: a freed AST's id is
        # reused by Z3, so an id alone could return another formula's answer
        key = f.get_id()
        hit = self.cache.get(key)
        if hit is None:
            hit = (f, self.check_unsat([z3.Not(f)]))
            self.cache[key] = hit
        return hit[1]

    def check_unsat(self, extra: list) -> bool:
        """The facts and ``extra`` are inconsistent. The incremental solver may answer
        'unknown' on integer div/mod where a fresh one decides: retried once fresh."""
        self.solver.push()
        self.solver.add(*extra)
        r = self.solver.check()
        self.solver.pop()
        if r == z3.unknown:
            r = staged([*self.solver.assertions(), *extra], FRESH_TRIES, retry=True)
        return r == z3.unsat

    def decide(self, c):
        if c is True or c is False:
            return c
        f = T.cond_z3(c)
        if self.valid(f):
            return True
        if self.valid(z3.Not(f)):
            return False
        return None


def decide_under(facts: list, c):
    if c is True or c is False:
        return c
    s = z3.Solver()
    s.set("timeout", 20000)
    s.add(*facts)
    f = T.cond_z3(c)
    s.push()
    s.add(z3.Not(f))
    if s.check() == z3.unsat:
        return True
    s.pop()
    s.add(f)
    if s.check() == z3.unsat:
        return False
    return None
