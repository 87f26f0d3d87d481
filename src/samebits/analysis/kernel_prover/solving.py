"""One solver call for the prover's queries, robust to a loaded machine.

z3's `timeout` is wall-clock: on a busy machine a query the solver answers in seconds can
come back `unknown` (seen once in a CI rehearsal with other jobs on the two cores). A query
that timed out is asked once more with RETRY_TIMEOUT_MS. sat and unsat are final answers, so
the retry changes no verdict a quiet machine gives; it only keeps load from turning a proof
into "unsupported". An `unknown` for any other reason (incompleteness) is returned at once.

`staged` asks one question of fresh solvers in stages (arithmetic engine, time limit): Z3's
older simplex arithmetic (``smt.arith.solver=2``) and the default each decide in milliseconds
some of the prover's index questions on which the other runs into any limit (measured
2026-12-04 / 2026-12-07), so both are tried briefly before either gets a long limit. Which
stage answers changes no verdict: sat / unsat from any is final.
"""

from __future__ import annotations

import z3

RETRY_TIMEOUT_MS = 600_000


def check(s: z3.Solver) -> z3.CheckSatResult:
    """`s.check()`, retried once with a longer timeout after a timeout."""
    res = s.check()
    if res == z3.unknown and s.reason_unknown() in ("timeout", "canceled"):
        s.set("timeout", RETRY_TIMEOUT_MS)
        res = s.check()
    return res


def staged(facts: list, tries: tuple, retry: bool = False) -> z3.CheckSatResult:
    """sat / unsat / unknown of ``facts`` by fresh solvers, one per ``(arith, limit_ms)`` of
    ``tries`` (arith None: the default engine) until one answers; ``retry``: the last stage
    through `check` (a timeout asked once more)."""
    res = z3.unknown
    for i, (arith, limit) in enumerate(tries):
        s = z3.Solver()
        if arith is not None:
            s.set("smt.arith.solver", arith)
        s.set("timeout", limit)
        s.add(*facts)
        res = check(s) if retry and i == len(tries) - 1 else s.check()
        if res != z3.unknown:
            break
    return res
