"""The exhaustive model checker: the default suite holds (with the coverage it claims), and
planted bugs (monkeypatched into the real engine core, never edited in) are caught."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pytest

from samebits.analysis import model_checker, scenarios, symbolic_model, world
from samebits.analysis.model_checker import check
from samebits.analysis.scenarios import DEFAULT_SUITE, CheckConfig
from samebits.engine import block_pool, kv_cache_manager, prefix_hash
from samebits.engine.kv_cache_manager import KVCacheManager
from samebits.engine.scheduler import SchedulerOutput


def test_default_suite_holds_with_claimed_coverage() -> None:
    """Every configuration of docs/model_checker.md passes; together they exercise
    preemption, prefix hits, chunked prefill, aborts of running and waiting requests, and
    every finish kind."""
    totals: dict[str, int] = {}
    for config in DEFAULT_SUITE:
        result = check(config)
        assert result.counterexample is None, f"{config.name}: {result.counterexample}"
        cov = result.coverage
        assert result.num_states > 500, result.summary()
        assert result.num_schedules > result.num_states, result.summary()
        assert cov.aborts_running and cov.aborts_waiting and cov.chunked_prefills, result.summary()
        assert cov.prefix_hit_admissions > 0 or not config.enable_prefix_caching
        for name, value in vars(cov).items():
            totals[name] = totals.get(name, 0) + value
    assert totals["preempting_steps"] > 0
    assert totals["finished_stop"] > 0 and totals["finished_length"] > 0


def test_cli_quick_prints_counts(capsys: pytest.CaptureFixture[str]) -> None:
    assert model_checker.main(["--quick"]) == 0
    out = capsys.readouterr().out
    for config in scenarios.QUICK_SUITE:
        assert f"{config.name}: " in out and "states" in out and ": OK" in out
    assert out.strip().splitlines()[-1].startswith("total: ")


# ---------------------------------------------------------------------- planted bugs

# Small bounds for the mutants: one prefix-sharing scenario with preemptions and an 8-way
# budget choice; every mutant below has a counterexample within them.
MUTANT_CONFIG = CheckConfig("mutants", (scenarios.A, scenarios.B, scenarios.C), 4, (1, 2, 4, 8), 3)


def _hit_covers_last_token(mp: pytest.MonkeyPatch) -> None:
    def get_computed_blocks(self: KVCacheManager, request):
        self.update_block_hashes(request)
        hits = []
        for block_hash in request.block_hashes:  # bug: no cap at num_tokens - 1
            block = self.block_pool.get_cached_block(block_hash)
            if block is None:
                break
            hits.append(block)
        return hits, len(hits) * self.block_size

    mp.setattr(KVCacheManager, "get_computed_blocks", get_computed_blocks)


def _reused_block_keeps_old_hash(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(block_pool.BlockPool, "_evict", lambda self, block: None)


def _lru_reversed(mp: pytest.MonkeyPatch) -> None:
    original = block_pool.BlockPool.free_blocks

    def free_blocks(self, ordered_blocks):
        ordered_blocks = list(ordered_blocks)
        original(self, ordered_blocks)
        for block in ordered_blocks:  # bug: freed blocks go to the head (evicted first)
            if block.ref_cnt == 0:
                self.free_block_queue.move_to_end(block.block_id, last=False)

    mp.setattr(block_pool.BlockPool, "free_blocks", free_blocks)


def _lru_pops_newest(mp: pytest.MonkeyPatch) -> None:
    def get_new_blocks(self, num_blocks):
        blocks = []
        for _ in range(num_blocks):
            _, block = self.free_block_queue.popitem(last=True)  # bug: MRU eviction
            self._newest_allocated_stamp = max(self._newest_allocated_stamp, block.free_stamp)
            self._evict(block)
            block.ref_cnt = 1
            blocks.append(block)
        return blocks

    mp.setattr(block_pool.BlockPool, "get_new_blocks", get_new_blocks)


def _block_table_off_by_one(mp: pytest.MonkeyPatch) -> None:
    mp.setattr(kv_cache_manager, "cdiv", lambda a, b: a // b)  # one block short mid-block


def _prefix_blind_hash(mp: pytest.MonkeyPatch) -> None:
    original = prefix_hash.hash_block_tokens
    fixed_parent = bytes(prefix_hash.DIGEST_SIZE)
    mp.setattr(
        prefix_hash, "hash_block_tokens", lambda parent, tokens: original(fixed_parent, tokens)
    )


def _caches_unwritten_block(mp: pytest.MonkeyPatch) -> None:
    original = KVCacheManager.cache_blocks

    def cache_blocks(self, request, num_computed_tokens):
        rounded = kv_cache_manager.cdiv(num_computed_tokens, self.block_size) * self.block_size
        original(self, request, min(rounded, request.num_tokens))  # bug: partial block cached

    mp.setattr(KVCacheManager, "cache_blocks", cache_blocks)


def _hit_not_referenced(mp: pytest.MonkeyPatch) -> None:
    def touch(self, blocks):
        for block in blocks:  # bug: a hit on a held block does not take a reference
            if block.ref_cnt == 0:
                del self.free_block_queue[block.block_id]
                block.ref_cnt = 1

    mp.setattr(block_pool.BlockPool, "touch", touch)


def _missed_write(mp: pytest.MonkeyPatch) -> None:
    original = symbolic_model.SymbolicRunner._write

    def write(self, layer, item, slots, hidden):
        original(self, layer, item, slots, hidden[:-1])  # the chunk's last K/V is dropped

    mp.setattr(symbolic_model.SymbolicRunner, "_write", write)


def _misordered_read(mp: pytest.MonkeyPatch) -> None:
    original = symbolic_model.SymbolicRunner._attend

    def attend(self, layer, item, slots, hidden):
        swapped = list(slots)
        if len(swapped) >= 2:
            swapped[0], swapped[1] = swapped[1], swapped[0]
        return original(self, layer, item, swapped, hidden)

    mp.setattr(symbolic_model.SymbolicRunner, "_attend", attend)


# (name, plant, kinds accepted with all checks, kinds accepted with behaviour checks only or
# None when the bug is invisible to behaviour)
MUTANTS: list[tuple[str, Callable[[pytest.MonkeyPatch], None], set[str], set[str] | None]] = [
    ("a-hit-covers-last-token", _hit_covers_last_token, {"integrity"}, {"integrity"}),
    ("b-reused-block-keeps-hash", _reused_block_keeps_old_hash, {"integrity"}, {"crash", "spec"}),
    ("c-lru-reversed", _lru_reversed, {"integrity"}, None),
    ("c2-lru-pops-newest", _lru_pops_newest, {"integrity"}, None),
    ("d-block-table-off-by-one", _block_table_off_by_one, {"contract"}, {"contract"}),
    ("e-prefix-blind-hash", _prefix_blind_hash, {"spec"}, {"spec"}),
    ("f-caches-unwritten-block", _caches_unwritten_block, {"integrity"}, {"crash", "spec"}),
    ("g-hit-not-referenced", _hit_not_referenced, {"integrity"}, {"crash", "spec"}),
    ("runner-missed-write", _missed_write, {"spec"}, {"spec"}),
    ("runner-misordered-read", _misordered_read, {"spec"}, {"spec"}),
]


def test_mutant_bounds_pass_unmutated() -> None:
    for structural_checks in (True, False):
        assert check(MUTANT_CONFIG, structural_checks).counterexample is None


@pytest.mark.parametrize(
    ("plant", "kinds", "behaviour_kinds"),
    [m[1:] for m in MUTANTS],
    ids=[m[0] for m in MUTANTS],
)
def test_planted_bug_is_caught(
    monkeypatch: pytest.MonkeyPatch,
    plant: Callable[[pytest.MonkeyPatch], None],
    kinds: set[str],
    behaviour_kinds: set[str] | None,
) -> None:
    plant(monkeypatch)
    found = check(MUTANT_CONFIG).counterexample
    assert found is not None and found.kind in kinds, str(found)
    assert found.trace and found.trace[-1][0] in {"add", "abort", "step"}
    behaviour = check(MUTANT_CONFIG, structural_checks=False).counterexample
    if behaviour_kinds is None:
        assert behaviour is None, str(behaviour)
    else:
        assert behaviour is not None and behaviour.kind in behaviour_kinds, str(behaviour)


def test_livelock_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    original = world.Model.apply

    def apply(self, w, action):
        if action[0] != "step":
            original(self, w, action)  # bug: a step changes nothing

    monkeypatch.setattr(world.Model, "apply", apply)
    found = check(MUTANT_CONFIG).counterexample
    assert found is not None and found.kind == "livelock", str(found)


def test_idle_step_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(world.Scheduler, "schedule", lambda self: SchedulerOutput((), (), 0))
    found = check(MUTANT_CONFIG).counterexample
    assert found is not None and found.kind == "progress", str(found)


LOOKAHEAD_CONFIG = next(c for c in DEFAULT_SUITE if c.name == "FGH-3blocks-lookahead")


def test_lookahead_configs_explore_steps_in_flight() -> None:
    """The lookahead configurations hold and reach what they are for: steps scheduled ahead,
    rows wasted by a stop, a length limit or an abort while in flight, preemption."""
    for config in (c for c in DEFAULT_SUITE if c.lookahead):
        result = check(config)
        assert result.counterexample is None, f"{config.name}: {result.counterexample}"
        cov = result.coverage
        assert cov.ahead_steps > 500 and cov.wasted_rows > 100, result.summary()
        assert cov.preempting_steps > 0 and cov.aborts_running > 0, result.summary()


def _ahead_misfed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The feed gathers another request's token (a wrong row index in the runner)."""
    monkeypatch.setattr(
        world.Model, "_fed_token", staticmethod(lambda sampled, rid: sampled[max(sampled)])
    )


def _ahead_without_free_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    """schedule_ahead believes no block is ever needed."""
    monkeypatch.setattr(world.Scheduler, "_blocks_to_grow", lambda self, request, n: 0)


def _ahead_at_the_last_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """The step ahead recomputes the last known position instead of the next one."""
    original = world.Scheduler._scheduled_ahead

    def scheduled(self, request):
        item = original(self, request)
        return dataclasses.replace(item, start_position=item.start_position - 1)

    monkeypatch.setattr(world.Scheduler, "_scheduled_ahead", scheduled)


@pytest.mark.parametrize(
    ("plant", "kinds"),
    [(_ahead_misfed, {"spec"}), (_ahead_without_free_blocks, {"integrity", "crash"}),
     (_ahead_at_the_last_token, {"contract"})],
    ids=["misfed", "no-free-block-check", "last-token"],
)  # fmt: skip
def test_planted_lookahead_bug_is_caught(monkeypatch: pytest.MonkeyPatch, plant, kinds) -> None:
    plant(monkeypatch)
    found = check(LOOKAHEAD_CONFIG).counterexample
    assert found is not None and found.kind in kinds, str(found)
    assert any(kind == "ahead" for kind, _ in found.trace)
