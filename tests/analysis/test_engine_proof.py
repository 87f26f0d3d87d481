"""The unbounded proof of the engine protocol (docs/engine_proof.md): every obligation is
proved for a symbolic block size and for fixed ones, the bounded counterexample search finds
nothing in the correct protocol, and every planted protocol bug is rejected with a
counterexample."""

from __future__ import annotations

import ast
import time
from pathlib import Path

import pytest

from samebits.analysis.engine_proof import counterexample, invariant
from samebits.analysis.engine_proof.__main__ import main
from samebits.analysis.engine_proof.logic import Z3Logic
from samebits.analysis.engine_proof.mutants import MUTANTS, Mutant
from samebits.analysis.engine_proof.obligations import all_obligations
from samebits.analysis.engine_proof.prover import prove
from samebits.analysis.engine_proof.transitions import TRANSITIONS

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "samebits" / "analysis" / "engine_proof"
NUM_PARTS = len(invariant.PARTS) + 1  # + the reference-count frame
TOTAL = 170  # 1 lemma + 13 initial + 12 transitions x 13


def test_obligation_counts() -> None:
    obligations = all_obligations(Z3Logic(None))
    assert len(obligations) == 1 + NUM_PARTS * (len(TRANSITIONS) + 1) == TOTAL
    assert len({o.name for o in obligations}) == len(obligations)


@pytest.mark.parametrize("block_size", [None, 1, 16])
def test_protocol_invariant_is_inductive(block_size: int | None) -> None:
    start = time.perf_counter()
    report = prove(block_size)
    wall = time.perf_counter() - start
    assert not report.failed, [str(o) for o in report.failed]
    assert report.proved == TOTAL
    assert wall < 60, f"the proof took {wall:.1f} s"


def test_no_bounded_counterexample_in_the_protocol() -> None:
    """The bounded encoding is not spurious: it finds nothing where the proof holds."""
    for transition in TRANSITIONS:
        for part in [*invariant.PARTS, "refcount"]:
            found = counterexample.find(transition, part)
            assert found is None, str(found)


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_planted_protocol_bug_is_rejected(mutant: Mutant) -> None:
    name, part = mutant.expect.split("/")
    report = prove(None, mutant.transitions(), only=f"{name}/", timeout_ms=2000)
    assert mutant.expect in {o.name for o in report.failed}, mutant.name
    transition = next(t for t in mutant.transitions() if t.name == name)
    found = counterexample.find(transition, part)
    assert found is not None, f"{mutant.name}: no bounded counterexample"
    assert found.obligation == mutant.expect and found.arguments


def test_cli_prints_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--only", "hit/"]) == 0
    out = capsys.readouterr().out.strip().splitlines()
    assert out[-1].startswith(f"{NUM_PARTS}/{NUM_PARTS} obligations proved")


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_package_reads_no_clock_and_no_randomness(path: Path) -> None:
    """The analysis package is deterministic: no clock, no randomness, no Python hash()."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for module in names:
                assert (module or "").split(".")[0] not in {"time", "datetime", "random"}, module
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in {"hash", "id"}, f"{path.name}:{node.lineno}"
