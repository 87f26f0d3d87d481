"""Discharges obligations with Z3 and reports proofs, counterexamples and Z3's own timing.

No clock is read here (the analysis package stays free of `time`); `z3_seconds` is the
solver's own "time" statistic. Wall time is measured by the caller (tests, shell).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import z3

from samebits.analysis.engine_proof.logic import Z3Logic
from samebits.analysis.engine_proof.obligations import (
    Obligation,
    all_obligations,
    axioms,
    trunc_store_lemma,
)
from samebits.analysis.engine_proof.transitions import TRANSITIONS, Transition

TIMEOUT_MS = 60_000


@dataclass(frozen=True)
class Outcome:
    """`status`: "proved" (unsat), "refuted" (sat: `counterexample` names the arguments) or
    "unknown" (timeout / incomplete quantifier reasoning: not a proof)."""

    name: str
    status: str
    z3_seconds: float
    counterexample: str = ""


@dataclass
class Report:
    outcomes: list[Outcome] = field(default_factory=list)

    @property
    def proved(self) -> int:
        return sum(o.status == "proved" for o in self.outcomes)

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status != "proved"]

    @property
    def z3_seconds(self) -> float:
        return sum(o.z3_seconds for o in self.outcomes)


def discharge(L: Z3Logic, obligation: Obligation, timeout_ms: int = TIMEOUT_MS) -> Outcome:
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.set("smt.mbqi", False)  # E-matching only: a proof is unsat either way
    solver.add(*axioms(L))
    if not obligation.lemma:
        solver.add(trunc_store_lemma(L))
    solver.add(obligation.formula)
    result = solver.check()
    seconds = _z3_time(solver)
    if result == z3.unsat:
        return Outcome(obligation.name, "proved", seconds)
    if result == z3.sat:
        return Outcome(obligation.name, "refuted", seconds, _describe(solver.model(), obligation))
    return Outcome(obligation.name, "unknown", seconds, solver.reason_unknown())


def prove(
    block_size: int | None = None,
    transitions: Iterable[Transition] = TRANSITIONS,
    only: str = "",
    timeout_ms: int = TIMEOUT_MS,
) -> Report:
    """Discharge every obligation (those whose name contains `only`); `block_size=None`
    proves for a symbolic block size."""
    L = Z3Logic(block_size)
    report = Report()
    for obligation in all_obligations(L, transitions):
        if only in obligation.name:
            report.outcomes.append(discharge(L, obligation, timeout_ms))
    return report


def _z3_time(solver: z3.Solver) -> float:
    stats = solver.statistics()
    keys = stats.keys()
    return float(stats.get_key_value("time")) if "time" in keys else 0.0


def _describe(model: z3.ModelRef, obligation: Obligation) -> str:
    parts = [f"{name}={model.eval(arg, model_completion=True)}" for name, arg in obligation.args]
    return f"{obligation.name}: counterexample with " + (", ".join(parts) or "the initial state")
