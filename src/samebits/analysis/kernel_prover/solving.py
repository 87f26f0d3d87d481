"""One solver call for the prover's queries, robust to a loaded machine.

z3's `timeout` is wall-clock: on a busy machine a query the solver answers in seconds can
come back `unknown` (seen once in a CI rehearsal with other jobs on the two cores). A query
that timed out is asked once more with RETRY_TIMEOUT_MS. sat and unsat are final answers, so
the retry changes no verdict a quiet machine gives; it only keeps load from turning a proof
into "unsupported". An `unknown` for any other reason (incompleteness) is returned at once.
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
