"""Scheduler: catch-up scheduling with chunked prefill, FCFS admission with prefix hits,
preemption of the newest request, stop conditions, aborts; check_integrity after every step.
Also checks that the engine core stays pure Python (no torch/numpy, no hash()/id()/random)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

from samebits.config import CacheConfig, SchedulerConfig
from samebits.engine.request import Request, RequestStatus
from samebits.engine.scheduler import Scheduler, SchedulerOutput

SRC = Path(__file__).resolve().parents[2] / "src" / "samebits"


def _scheduler(**overrides) -> Scheduler:
    args = dict(
        max_num_seqs=4,
        max_num_batched_tokens=8,
        max_model_len=64,
        block_size=2,
        num_kv_blocks=8,
    )
    args.update(overrides)
    return Scheduler(**args)


def _step(
    scheduler: Scheduler, token: Callable[[str], int] = lambda rid: 7
) -> tuple[SchedulerOutput, list[Request]]:
    """One engine step with a stand-in sampler; integrity is checked after each half."""
    out = scheduler.schedule()
    scheduler.check_integrity()
    for item in out.scheduled:
        covered = len(item.block_table) * scheduler.block_size
        assert covered >= item.start_position + len(item.token_ids)
        assert covered - scheduler.block_size < item.start_position + len(item.token_ids)
    sampled = {item.request_id: token(item.request_id) for item in out.scheduled if item.sample}
    finished = scheduler.update_from_output(out, sampled)
    scheduler.check_integrity()
    return out, finished


def _chunks(out: SchedulerOutput) -> list[tuple[str, int, int, bool]]:
    return [(s.request_id, s.start_position, len(s.token_ids), s.sample) for s in out.scheduled]


def test_chunked_prefill_then_decode_until_max_tokens() -> None:
    scheduler = _scheduler(max_num_batched_tokens=3)
    request = Request("a", [1, 2, 3, 4, 5, 6, 7], max_tokens=3)
    scheduler.add_request(request)
    out, _ = _step(scheduler)
    assert _chunks(out) == [("a", 0, 3, False)]
    assert out.scheduled[0].token_ids == (1, 2, 3)
    assert out.num_batched_tokens == 3
    out, _ = _step(scheduler)
    assert _chunks(out) == [("a", 3, 3, False)]
    out, _ = _step(scheduler)
    assert _chunks(out) == [("a", 6, 1, True)]
    assert request.output_token_ids == [7]
    out, _ = _step(scheduler)
    assert _chunks(out) == [("a", 7, 1, True)]
    assert out.scheduled[0].token_ids == (7,)
    out, finished = _step(scheduler)
    assert finished == [request]
    assert request.status is RequestStatus.FINISHED_LENGTH
    assert request.finish_reason == "length"
    assert not scheduler.has_unfinished_requests()
    assert scheduler.kv_cache_manager.num_free_blocks == 8


def test_running_first_then_waiting_fcfs() -> None:
    scheduler = _scheduler(max_num_batched_tokens=4)
    scheduler.add_request(Request("a", [1, 2, 3], max_tokens=5))
    scheduler.add_request(Request("b", [4, 5, 6], max_tokens=5))
    scheduler.add_request(Request("c", [7], max_tokens=5))
    out, _ = _step(scheduler)
    assert _chunks(out) == [("a", 0, 3, True), ("b", 0, 1, False)]
    out, _ = _step(scheduler)
    assert _chunks(out) == [("a", 3, 1, True), ("b", 1, 2, True), ("c", 0, 1, True)]
    assert [r.arrival_index for r in scheduler.running] == [0, 1, 2]


def test_max_num_seqs_limits_admission() -> None:
    scheduler = _scheduler(max_num_seqs=1)
    scheduler.add_request(Request("a", [1], max_tokens=2))
    scheduler.add_request(Request("b", [2], max_tokens=2))
    out, _ = _step(scheduler)
    assert _chunks(out) == [("a", 0, 1, True)]
    out, finished = _step(scheduler)
    assert _chunks(out) == [("a", 1, 1, True)]
    assert [r.request_id for r in finished] == ["a"]
    out, _ = _step(scheduler)
    assert _chunks(out) == [("b", 0, 1, True)]
    assert scheduler.get_num_unfinished_requests() == 1


def test_eos_stops_unless_ignored() -> None:
    scheduler = _scheduler()
    stop = Request("a", [1, 2], max_tokens=5, eos_token_ids=(7,))
    ignore = Request("b", [1, 2], max_tokens=2, eos_token_ids=(7,), ignore_eos=True)
    scheduler.add_request(stop)
    scheduler.add_request(ignore)
    _, finished = _step(scheduler)
    assert finished == [stop]
    assert (stop.status, stop.finish_reason, stop.stop_reason) == (
        RequestStatus.FINISHED_STOPPED,
        "stop",
        None,
    )
    _, finished = _step(scheduler)
    assert finished == [ignore] and ignore.finish_reason == "length"


def test_stop_token_ids_and_min_tokens() -> None:
    scheduler = _scheduler()
    request = Request("a", [1], max_tokens=9, stop_token_ids=(7,), min_tokens=2)
    scheduler.add_request(request)
    _, finished = _step(scheduler)
    assert finished == []
    _, finished = _step(scheduler)
    assert finished == [request]
    assert request.output_token_ids == [7, 7]
    assert request.stop_reason == 7


def test_max_model_len_ends_with_length() -> None:
    scheduler = _scheduler(max_model_len=7)
    request = Request("a", [1, 2, 3, 4, 5], max_tokens=10)
    scheduler.add_request(request)
    assert request.max_model_len == 7
    while scheduler.has_unfinished_requests():
        _step(scheduler)
    assert request.output_token_ids == [7, 7]
    assert request.status is RequestStatus.FINISHED_LENGTH


def test_kv_capacity_caps_the_length() -> None:
    scheduler = _scheduler(num_kv_blocks=3)
    request = Request("a", [1, 2, 3, 4, 5], max_tokens=10, max_model_len=30)
    scheduler.add_request(request)
    assert request.max_model_len == 7  # 3 blocks * 2 slots + the never-computed last token
    while scheduler.has_unfinished_requests():
        _step(scheduler)
    assert request.num_tokens == 7 and request.finish_reason == "length"


def test_add_request_validation() -> None:
    scheduler = _scheduler(num_kv_blocks=2, max_model_len=3)
    scheduler.add_request(Request("a", [1], max_tokens=1))
    with pytest.raises(ValueError, match="already in the scheduler"):
        scheduler.add_request(Request("a", [1], max_tokens=1))
    with pytest.raises(ValueError, match="needs 3 KV blocks, the cache has 2"):
        scheduler.add_request(Request("b", [1, 2, 3, 4, 5], max_tokens=1))
    with pytest.raises(ValueError, match="exceeds max_model_len 3"):
        scheduler.add_request(Request("c", [1, 2, 3, 4], max_tokens=1))
    started = Request("d", [1], max_tokens=2)
    started.append_output_token_id(3)
    with pytest.raises(ValueError, match="not a new request"):
        scheduler.add_request(started)


def test_preempts_newest_and_readmits_with_prefix_hit() -> None:
    scheduler = _scheduler(num_kv_blocks=4)
    a = Request("a", [1, 2, 3, 4], max_tokens=3)
    b = Request("b", [5, 6, 7], max_tokens=3)
    scheduler.add_request(a)
    scheduler.add_request(b)
    _step(scheduler)  # a: 2 blocks, b: 2 blocks; the cache is full
    out, _ = _step(scheduler)  # a needs a third block for position 4
    assert out.preempted == ("b",)
    assert _chunks(out) == [("a", 4, 1, True)]  # nothing admitted in a preempting step
    assert b.status is RequestStatus.PREEMPTED
    assert (b.num_computed_tokens, b.output_token_ids) == (0, [7])
    assert list(scheduler.waiting) == [b]
    assert scheduler.num_preemptions == 1
    while a.status is RequestStatus.RUNNING:
        _step(scheduler)
    out, _ = _step(scheduler)
    assert _chunks(out) == [("b", 2, 2, True)]  # block [5, 6] was still cached
    assert scheduler.prefix_cache_hits == 2


def test_request_preempts_itself_when_newest() -> None:
    scheduler = _scheduler(num_kv_blocks=4)
    a = Request("a", [1, 2, 3], max_tokens=3)
    b = Request("b", [4, 5, 6, 8], max_tokens=3)
    scheduler.add_request(a)
    scheduler.add_request(b)
    _step(scheduler)  # a holds 2 blocks (3 tokens), b holds 2 (4 tokens); cache full
    out, _ = _step(scheduler)  # a decodes inside its block; b needs a new one: preempts itself
    assert out.preempted == ("b",)
    assert _chunks(out) == [("a", 3, 1, True)]
    assert [r.request_id for r in scheduler.running] == ["a"]
    assert scheduler.waiting[0] is b


def test_blocked_waiting_head_stops_admission() -> None:
    scheduler = _scheduler(num_kv_blocks=4, max_num_batched_tokens=16)
    scheduler.add_request(Request("a", [1, 2, 3, 4, 5], max_tokens=4))
    scheduler.add_request(Request("b", [1, 9, 9, 9], max_tokens=1))
    scheduler.add_request(Request("c", [9], max_tokens=1))
    out, _ = _step(scheduler)
    assert _chunks(out) == [("a", 0, 5, True)]  # b needs 2 blocks, 1 is free; c must wait
    assert [r.request_id for r in scheduler.waiting] == ["b", "c"]


def test_finish_request_for_waiting_and_running() -> None:
    scheduler = _scheduler(max_num_seqs=1)
    a = Request("a", [1, 2, 3], max_tokens=4)
    b = Request("b", [4], max_tokens=4)
    scheduler.add_request(a)
    scheduler.add_request(b)
    _step(scheduler)
    assert scheduler.finish_request("b", RequestStatus.FINISHED_ABORTED) is b
    assert b.finish_reason == "abort"
    assert scheduler.finish_request("a", RequestStatus.FINISHED_STOPPED, "stop-str") is a
    assert a.stop_reason == "stop-str"
    assert scheduler.kv_cache_manager.num_free_blocks == 8
    assert scheduler.finish_request("a", RequestStatus.FINISHED_ABORTED) is None
    assert scheduler.finish_request("zz", RequestStatus.FINISHED_ABORTED) is None
    scheduler.check_integrity()
    assert not scheduler.has_unfinished_requests()
    with pytest.raises(ValueError, match="FINISHED_"):
        scheduler.finish_request("a", RequestStatus.RUNNING)


def test_update_skips_requests_finished_after_schedule() -> None:
    scheduler = _scheduler()
    scheduler.add_request(Request("a", [1, 2], max_tokens=4))
    scheduler.add_request(Request("b", [3, 4], max_tokens=4))
    out = scheduler.schedule()
    scheduler.finish_request("a", RequestStatus.FINISHED_ABORTED)
    assert scheduler.update_from_output(out, {"b": 5}) == []
    scheduler.check_integrity()
    assert scheduler.requests["b"].output_token_ids == [5]


def test_missing_sampled_token_is_an_error() -> None:
    scheduler = _scheduler()
    scheduler.add_request(Request("a", [1, 2], max_tokens=4))
    out = scheduler.schedule()
    with pytest.raises(ValueError, match="no token for request 'a'"):
        scheduler.update_from_output(out, {})


def test_stats_and_prefix_hits_on_admission() -> None:
    scheduler = _scheduler()
    scheduler.add_request(Request("a", [1, 2, 3, 4, 5], max_tokens=1))
    _step(scheduler)
    scheduler.add_request(Request("b", [1, 2, 3, 4, 6], max_tokens=2))
    out, _ = _step(scheduler)
    assert _chunks(out) == [("b", 4, 1, True)]
    stats = scheduler.make_stats()
    assert (stats.prefix_cache_queries, stats.prefix_cache_hits) == (10, 4)
    assert (stats.num_running_reqs, stats.num_waiting_reqs, stats.num_preemptions) == (1, 0, 0)
    assert stats.num_free_blocks == 5
    assert stats.kv_cache_usage == 3 / 8


def test_from_configs() -> None:
    scheduler = Scheduler.from_configs(
        CacheConfig(block_size=4, num_kv_blocks=5, enable_prefix_caching=False),
        SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=6, max_model_len=20),
        b"salt",
    )
    assert (scheduler.block_size, scheduler.num_kv_blocks, scheduler.max_num_seqs) == (4, 5, 2)
    assert scheduler.kv_cache_manager.cache_salt == b"salt"
    assert not scheduler.kv_cache_manager.enable_prefix_caching
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        _scheduler(max_num_batched_tokens=0)


def test_request_validation() -> None:
    with pytest.raises(ValueError, match="request_id"):
        Request("", [1], max_tokens=1)
    with pytest.raises(ValueError, match="must not be empty"):
        Request("a", [], max_tokens=1)
    with pytest.raises(ValueError, match=r"prompt_token_ids must hold ints in \[0, 2\*\*63\)"):
        Request("a", [1, -1], max_tokens=1)
    with pytest.raises(ValueError, match="max_tokens must be >= 1"):
        Request("a", [1], max_tokens=0)
    with pytest.raises(ValueError, match="ignore_eos"):
        Request("a", [1], max_tokens=1, ignore_eos=1)  # type: ignore[arg-type]
    request = Request("a", [1, 2], max_tokens=3)
    request.append_output_token_id(9)
    assert (request.all_token_ids, request.num_tokens, request.finish_reason) == (
        [1, 2, 9],
        3,
        None,
    )


# ---------------------------------------------------------------------- purity of the core

_CORE = [
    SRC / "engine" / name
    for name in (
        "__init__.py",
        "request.py",
        "prefix_hash.py",
        "block_pool.py",
        "kv_cache_manager.py",
        "scheduler.py",
    )
] + sorted((SRC / "analysis").glob("*.py"))


@pytest.mark.parametrize("path", _CORE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_core_is_pure_python_and_deterministic(path: Path) -> None:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for name in names:
                root = (name or "").split(".")[0]
                assert root not in {"torch", "numpy", "random", "time", "datetime"}, name
                assert name != "samebits.engine.runner", name
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in {"hash", "id"}, f"{path.name}:{node.lineno}"
