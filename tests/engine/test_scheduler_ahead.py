"""`Scheduler.schedule_ahead`: the step after a step whose tokens are not known yet. Only a
pure continuation qualifies; it reserves one placeholder per request (filled by the previous
step's update); a request that ends by length is left out; a refusal changes nothing; the
integrity invariants hold at every point of the interleaving."""

from __future__ import annotations

from samebits.engine.request import Request, RequestStatus
from samebits.engine.scheduler import PLACEHOLDER_TOKEN, Scheduler, SchedulerOutput


def _scheduler(**overrides) -> Scheduler:
    args = dict(max_num_seqs=4, max_num_batched_tokens=16, max_model_len=64, block_size=2)
    args["num_kv_blocks"] = 16
    args.update(overrides)
    return Scheduler(**args)


def _update(scheduler: Scheduler, out: SchedulerOutput, token: int = 7) -> list[Request]:
    finished = scheduler.update_from_output(
        out, {s.request_id: token for s in out.scheduled if s.sample}
    )
    scheduler.check_integrity()
    return finished


def _snapshot(scheduler: Scheduler) -> tuple:
    manager = scheduler.kv_cache_manager
    tables = {rid: manager.get_block_ids(rid) for rid in scheduler.requests}
    holds = [(r.request_id, r.num_output_placeholders) for r in scheduler.running]
    return tables, holds, manager.num_free_blocks


def _two_running(scheduler: Scheduler, max_tokens=(5, 5)) -> SchedulerOutput:
    for rid, n in zip("ab", max_tokens, strict=True):
        scheduler.add_request(Request(rid, [1, 2, 3], max_tokens=n))
    return scheduler.schedule()  # both prompts, both sample


def test_ahead_step_continues_with_placeholders_filled_by_the_update() -> None:
    scheduler = _scheduler()
    prev = _two_running(scheduler)
    ahead = scheduler.schedule_ahead(prev)
    assert ahead is not None
    scheduler.check_integrity()
    assert [(s.request_id, s.token_ids, s.start_position, s.sample) for s in ahead.scheduled] == [
        ("a", (PLACEHOLDER_TOKEN,), 3, True),
        ("b", (PLACEHOLDER_TOKEN,), 3, True),
    ]
    assert all(r.num_output_placeholders == 1 for r in scheduler.running)
    assert all(len(s.block_table) * 2 >= 4 for s in ahead.scheduled)  # covers position 3
    _update(scheduler, prev, token=9)
    assert all(r.num_output_placeholders == 0 for r in scheduler.running)
    assert [list(r.all_token_ids) for r in scheduler.running] == [[1, 2, 3, 9]] * 2
    _update(scheduler, ahead, token=5)
    assert [r.num_computed_tokens for r in scheduler.running] == [4, 4]
    assert [list(r.output_token_ids) for r in scheduler.running] == [[9, 5], [9, 5]]


def test_a_request_the_next_token_ends_by_length_is_left_out() -> None:
    scheduler = _scheduler()
    prev = _two_running(scheduler, max_tokens=(1, 5))
    ahead = scheduler.schedule_ahead(prev)
    assert [s.request_id for s in ahead.scheduled] == ["b"]
    finished = _update(scheduler, prev)
    assert [r.request_id for r in finished] == ["a"]
    _update(scheduler, ahead)
    assert scheduler.requests["b"].num_output_tokens == 2


def test_a_stop_token_after_the_ahead_step_frees_the_request() -> None:
    scheduler = _scheduler()
    scheduler.add_request(Request("a", [1, 2, 3], max_tokens=5, stop_token_ids=(4,)))
    prev = scheduler.schedule()
    ahead = scheduler.schedule_ahead(prev)
    assert [s.request_id for s in ahead.scheduled] == ["a"]
    assert [r.request_id for r in _update(scheduler, prev, token=4)] == ["a"]
    assert _update(scheduler, ahead) == []  # the wasted row is skipped
    assert scheduler.kv_cache_manager.num_free_blocks == 16
    assert not scheduler.has_unfinished_requests()


def test_no_step_ahead_with_a_waiting_request_or_unsampled_chunk() -> None:
    scheduler = _scheduler()
    prev = _two_running(scheduler)
    scheduler.add_request(Request("c", [1, 2], max_tokens=2))
    before = _snapshot(scheduler)
    assert scheduler.schedule_ahead(prev) is None
    assert _snapshot(scheduler) == before
    chunked = _scheduler(max_num_batched_tokens=2)
    chunked.add_request(Request("a", [1, 2, 3], max_tokens=2))
    assert chunked.schedule_ahead(chunked.schedule()) is None  # prompt chunk without a sample


def test_no_step_ahead_without_free_blocks_and_nothing_changes() -> None:
    scheduler = _scheduler(num_kv_blocks=4)
    prev = _two_running(scheduler)  # 2 blocks each: positions 0..3 need no new one
    _update(scheduler, prev)
    prev = scheduler.schedule()  # positions 3; the ahead step needs position 4: a 3rd block
    before = _snapshot(scheduler)
    assert scheduler.schedule_ahead(prev) is None
    assert _snapshot(scheduler) == before
    _update(scheduler, prev)
    scheduler.schedule()  # the normal path preempts instead
    assert scheduler.num_preemptions == 1


def test_no_second_ahead_step_while_a_placeholder_is_outstanding() -> None:
    scheduler = _scheduler()
    prev = _two_running(scheduler)
    ahead = scheduler.schedule_ahead(prev)
    assert scheduler.schedule_ahead(ahead) is None
    _update(scheduler, prev)
    assert scheduler.schedule_ahead(ahead) is not None  # chained, one step in front


def test_finishing_a_request_with_a_placeholder_frees_it() -> None:
    scheduler = _scheduler()
    prev = _two_running(scheduler)
    ahead = scheduler.schedule_ahead(prev)
    scheduler.finish_request("a", RequestStatus.FINISHED_ABORTED)
    scheduler.check_integrity()
    _update(scheduler, prev)
    _update(scheduler, ahead)
    assert list(scheduler.requests) == ["b"]
    assert scheduler.requests["b"].num_computed_tokens == 4
