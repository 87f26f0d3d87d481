"""The refinement check (docs/engine_proof.md): within the model checker's bounds every real
action of the engine core is a sequence of the proved transitions, every mapped state
satisfies the invariant; planted engine bugs make it fail with a trace, judged by the
refinement check alone (no integrity, write, spec or contract checks)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import pytest

from samebits.analysis import scenarios
from samebits.analysis.engine_proof import refinement
from samebits.analysis.engine_proof.transitions import TRANSITIONS
from samebits.analysis.scenarios import CheckConfig
from samebits.engine import block_pool

_CHECKER_TESTS = Path(__file__).resolve().parents[1] / "engine" / "test_model_checker.py"


def _checker_tests():
    spec = importlib.util.spec_from_file_location("_model_checker_tests", _CHECKER_TESTS)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CHECKER = _checker_tests()
A, B, C, F, G, H = (getattr(scenarios, n) for n in "ABCFGH")
# Bounds: prefix sharing (A = C, B repeats A's second block), preemption, eviction, aborts.
SMALL = CheckConfig("refinement-small", (A, B, C), 4, (1, 2, 5), 3)
CONFIGS = [SMALL, CheckConfig("refinement-fgh", (F, G, H), 3, (1, 3), 3)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.name)
def test_engine_refines_the_proved_protocol(config: CheckConfig) -> None:
    result, coverage = refinement.check_refinement(config)
    assert result.counterexample is None, str(result.counterexample)
    assert result.num_states > 500 and coverage.checked_states > result.num_transitions
    if config is SMALL:  # every proved transition is taken by the real engine
        assert set(coverage.transitions) == {t.name for t in TRANSITIONS}, coverage
    assert result.coverage.preempting_steps and result.coverage.prefix_hit_admissions


def _freed_while_referenced(mp: pytest.MonkeyPatch) -> None:
    def free_blocks(self, ordered_blocks):
        for block in ordered_blocks:  # bug: a shared block joins the free queue
            block.ref_cnt -= 1
            if block.block_id not in self.free_block_queue:
                block.free_stamp = self._clock
                self._clock += 1
                self.free_block_queue[block.block_id] = block

    mp.setattr(block_pool.BlockPool, "free_blocks", free_blocks)


# (name, plant): the model checker's planted bugs, then the new ones of issue 11 (a hit
# covering the last token, hashing before all tokens are written and an unchained hash are
# the checker's a, f and e).
ENGINE_MUTANTS: list[tuple[str, Callable[[pytest.MonkeyPatch], None]]] = [
    *((name, plant) for name, plant, _, _ in CHECKER.MUTANTS),
    ("freed-while-referenced", _freed_while_referenced),
]


# The engine's own guard in `schedule()` stops (a) before any state exists to map; the proof
# rejects the same bug in the protocol (mutants.py, hit-covers-last-token).
STOPPED_BY_ENGINE_GUARD = {"a-hit-covers-last-token"}


@pytest.mark.parametrize(("name", "plant"), ENGINE_MUTANTS, ids=[m[0] for m in ENGINE_MUTANTS])
def test_planted_engine_bug_fails_refinement(
    monkeypatch: pytest.MonkeyPatch, name: str, plant: Callable[[pytest.MonkeyPatch], None]
) -> None:
    plant(monkeypatch)
    result, _ = refinement.check_refinement(
        CHECKER.MUTANT_CONFIG, structural_checks=False, behaviour_checks=False
    )
    found = result.counterexample
    assert found is not None, "the refinement check accepted a planted bug"
    expected = "integrity" if name in STOPPED_BY_ENGINE_GUARD else "refinement"
    assert found.kind == expected, str(found)
    assert found.trace


def test_mapping_recognizes_prefix_values() -> None:
    """A slot holding the reference K/V of tokens 0..p maps to exactly PV(tokens[:p+1])."""
    model = refinement.RefinementModel(SMALL)
    world = model.initial()
    model.apply(world, ("add", 0))
    model.apply(world, ("step", 5))
    abstraction = refinement.Abstraction(model, world)
    state = abstraction.state()
    tokens = abstraction.tokens[0]
    table = world.scheduler.kv_cache_manager.get_block_ids("r0")
    assert 0 < world.known[0].num_computed_tokens < len(tokens)
    for p in range(world.known[0].num_computed_tokens):
        b, o = table[p // SMALL.block_size], p % SMALL.block_size
        assert state.kv[b][o] == abstraction.prefix_value(tokens[: p + 1])


def test_refinement_refuses_lookahead_configs() -> None:
    """Steps scheduled ahead are outside the refinement map (model-checked instead)."""
    from samebits.analysis.engine_proof.refinement import check_refinement

    with pytest.raises(ValueError, match="model-checked"):
        check_refinement(CheckConfig("ahead", (A, B, C), 4, (1, 2), 3, lookahead=True))
