"""`Scheduler`: vLLM's catch-up model over a paged, prefix-cached KV cache.

There are no prefill and decode phases: every request advances `num_computed_tokens` toward
`num_tokens` within a per-step token budget. Each step first serves the RUNNING requests in
admission order (each gets `min(num_tokens - num_computed_tokens, budget left)` tokens, so a
prompt is chunked at any size), then admits WAITING requests first come, first served, with a
prefix-cache lookup on admission, while the budget and `max_num_seqs` allow.

When a running request cannot get blocks, the newest running request is preempted (recompute:
its blocks are freed, `num_computed_tokens = 0`, it goes to the front of the waiting queue and
keeps its outputs) and the allocation is retried; a request that is itself the newest is
preempted. No request is admitted in a step that preempted one. A waiting request that cannot
get blocks stops admission (strict FCFS).

`schedule_ahead(prev)` plans the step after `prev` before prev's tokens are known, for a step
that only continues prev: nothing is waiting and every running request sampled in prev. Each
request then computes one token it does not know yet (`PLACEHOLDER_TOKEN`: the runner feeds
prev's sampled token on the device), reserved as a placeholder that `update_from_output(prev)`
fills. A request prev's token ends by length is left out; one it ends by a stop token computes
a row nobody reads (its K/V lands in a block that is freed, never hashed).

Every decision depends only on ordered containers (lists, deques, insertion-ordered dicts), so
the schedule is a pure function of the sequence of calls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from samebits.config import CacheConfig, SchedulerConfig
from samebits.engine.block_pool import KVCacheBlock
from samebits.engine.kv_cache_manager import KVCacheManager, cdiv
from samebits.engine.request import Request, RequestStatus

PLACEHOLDER_TOKEN = -1  # a token id of a step scheduled ahead: the previous step's sample


@dataclass(frozen=True)
class ScheduledRequest:
    """One request's work in a step (see docs/architecture.md, scheduler -> runner)."""

    request_id: str
    token_ids: tuple[int, ...]  # all_token_ids[start_position : start_position + n], n >= 1
    start_position: int  # num_computed_tokens before this step
    block_table: tuple[int, ...]  # physical block ids covering [0, start_position + n)
    sample: bool  # the chunk ends at the request's last known token: sample a token
    all_rows: bool = False  # the runner returns the logits of every row of the chunk


@dataclass(frozen=True)
class SchedulerOutput:
    """One step's batch: running requests first, then newly admitted ones."""

    scheduled: tuple[ScheduledRequest, ...]
    preempted: tuple[str, ...]
    num_batched_tokens: int


@dataclass(frozen=True)
class SchedulerStats:
    """A snapshot for /metrics. Prefix-cache counters are in tokens, counted at admission."""

    num_running_reqs: int
    num_waiting_reqs: int
    num_preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    num_free_blocks: int
    kv_cache_usage: float


class Scheduler:
    """Decides, step by step, which tokens of which requests are computed, and with which
    blocks. Invariants (`check_integrity`): RUNNING requests are exactly the block holders;
    waiting requests hold no blocks and have `num_computed_tokens == 0`; no request is both
    waiting and running; `len(running) <= max_num_seqs`."""

    def __init__(
        self,
        *,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        block_size: int,
        num_kv_blocks: int,
        enable_prefix_caching: bool = True,
        cache_salt: bytes = b"",
    ) -> None:
        if max_model_len is None or num_kv_blocks is None:
            raise ValueError(
                "the Scheduler needs resolved sizes: max_model_len and num_kv_blocks must be "
                f"set, got {max_model_len!r} and {num_kv_blocks!r}"
            )
        # the frozen, validated parts of the EngineConfig this scheduler runs on
        self.scheduler_config = SchedulerConfig(max_num_seqs, max_num_batched_tokens, max_model_len)
        self.cache_config = CacheConfig(block_size, num_kv_blocks, enable_prefix_caching)
        self.max_num_seqs = max_num_seqs
        self.max_num_batched_tokens = max_num_batched_tokens
        self.max_model_len = max_model_len
        self.block_size = block_size
        self.kv_cache_manager = KVCacheManager(
            block_size, num_kv_blocks, enable_prefix_caching, cache_salt
        )
        self.requests: dict[str, Request] = {}
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.num_preemptions = 0
        self.prefix_cache_queries = 0
        self.prefix_cache_hits = 0
        self._next_arrival = 0

    @classmethod
    def from_configs(
        cls, cache: CacheConfig, scheduler: SchedulerConfig, cache_salt: bytes = b""
    ) -> Scheduler:
        """A scheduler on its parts of an EngineConfig (sizes resolved: `num_kv_blocks`,
        `max_model_len` and the budgets set, as a resolved `EngineConfig` has them;
        `gpu_memory_utilization` is the engine's business)."""
        if scheduler.max_model_len is None or cache.num_kv_blocks is None:
            raise ValueError("Scheduler.from_configs needs max_model_len and num_kv_blocks set")
        seqs, tokens = scheduler.max_num_seqs, scheduler.max_num_batched_tokens
        if seqs is None or tokens is None:
            raise ValueError(
                "Scheduler.from_configs needs max_num_seqs and max_num_batched_tokens set (an "
                f"EngineConfig fills them in from its device), got {seqs!r} and {tokens!r}"
            )
        return cls(
            max_num_seqs=seqs,
            max_num_batched_tokens=tokens,
            max_model_len=scheduler.max_model_len,
            block_size=cache.block_size,
            num_kv_blocks=cache.num_kv_blocks,
            enable_prefix_caching=cache.enable_prefix_caching,
            cache_salt=cache_salt,
        )

    @property
    def num_kv_blocks(self) -> int:
        return self.kv_cache_manager.block_pool.num_blocks

    # ------------------------------------------------------------------ requests in and out

    def add_request(self, request: Request) -> None:
        """Queue a new request (status WAITING). Sets `arrival_index` and caps
        `request.max_model_len` at the scheduler's limit and at the KV cache capacity
        (`num_kv_blocks * block_size + 1`: the last token's K/V is never needed), so a request
        running alone always fits. Raises ValueError for a duplicate id, a finished or
        already-started request, or a prompt longer than either limit."""
        rid = request.request_id
        if rid in self.requests:
            raise ValueError(f"request_id {rid!r} is already in the scheduler")
        if request.status is not RequestStatus.WAITING or request.output_token_ids:
            raise ValueError(f"request {rid!r} is not a new request (status {request.status})")
        capacity = self.num_kv_blocks * self.block_size
        if request.num_prompt_tokens > capacity:
            raise ValueError(
                f"request {rid!r}: prompt of {request.num_prompt_tokens} tokens needs "
                f"{cdiv(request.num_prompt_tokens, self.block_size)} KV blocks, "
                f"the cache has {self.num_kv_blocks} (raise num_kv_blocks, or "
                "gpu_memory_utilization on a GPU)"
            )
        limit = min(self.max_model_len, capacity + 1, request.max_model_len or self.max_model_len)
        if request.num_prompt_tokens > limit:
            raise ValueError(
                f"request {rid!r}: prompt of {request.num_prompt_tokens} tokens exceeds "
                f"max_model_len {limit}"
            )
        request.max_model_len = limit
        request.arrival_index = self._next_arrival
        self._next_arrival += 1
        self.requests[rid] = request
        self.waiting.append(request)

    def finish_request(
        self, request_id: str, status: RequestStatus, stop_reason: int | str | None = None
    ) -> Request | None:
        """Finish a waiting or running request from outside (stop string, abort) and free its
        blocks. Returns the request, or None when it is unknown or already finished."""
        if not status.is_finished:
            raise ValueError(f"finish_request needs a FINISHED_* status, got {status}")
        request = self.requests.get(request_id)
        if request is None:
            return None
        if request.status is RequestStatus.RUNNING:
            self.running.remove(request)
        else:
            self.waiting.remove(request)
        if stop_reason is not None:
            request.stop_reason = stop_reason
        self._finish(request, status)
        return request

    def _finish(self, request: Request, status: RequestStatus) -> None:
        request.status = status
        self.kv_cache_manager.free(request)
        del self.requests[request.request_id]

    def has_unfinished_requests(self) -> bool:
        return bool(self.requests)

    def get_num_unfinished_requests(self) -> int:
        return len(self.requests)

    def make_stats(self) -> SchedulerStats:
        return SchedulerStats(
            num_running_reqs=len(self.running),
            num_waiting_reqs=len(self.waiting),
            num_preemptions=self.num_preemptions,
            prefix_cache_queries=self.prefix_cache_queries,
            prefix_cache_hits=self.prefix_cache_hits,
            num_free_blocks=self.kv_cache_manager.num_free_blocks,
            kv_cache_usage=self.kv_cache_manager.get_usage(),
        )

    # ------------------------------------------------------------------ scheduling

    def schedule(self) -> SchedulerOutput:
        """Plan one step. Mutates the queues, block tables and (on admission) the prefix-hit
        `num_computed_tokens`; the tokens themselves are only advanced by
        `update_from_output`."""
        budget = self.max_num_batched_tokens
        scheduled: list[ScheduledRequest] = []
        preempted: list[str] = []
        index = 0
        while index < len(self.running) and budget > 0:
            request = self.running[index]
            num_new = min(request.num_tokens - request.num_computed_tokens, budget)
            if not self._allocate_running(request, num_new, preempted):
                break
            scheduled.append(self._scheduled(request, num_new))
            budget -= num_new
            index += 1
        if not preempted:
            budget = self._admit_waiting(budget, scheduled)
        return SchedulerOutput(
            scheduled=tuple(scheduled),
            preempted=tuple(preempted),
            num_batched_tokens=self.max_num_batched_tokens - budget,
        )

    def _allocate_running(self, request: Request, num_new: int, preempted: list[str]) -> bool:
        """Allocate for a running request, preempting the newest running requests as needed.
        False when the request itself had to be preempted."""
        if num_new < 1:
            raise AssertionError(f"running request {request.request_id!r} has no token to compute")
        while self.kv_cache_manager.allocate_slots(request, num_new) is None:
            victim = self.running.pop()
            self._preempt(victim)
            preempted.append(victim.request_id)
            if victim is request:
                return False
        return True

    def _preempt(self, request: Request) -> None:
        self.kv_cache_manager.free(request)
        request.num_output_placeholders = 0
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        self.waiting.appendleft(request)
        self.num_preemptions += 1

    def _admit_waiting(self, budget: int, scheduled: list[ScheduledRequest]) -> int:
        """Admit waiting requests FCFS; returns the budget left."""
        manager = self.kv_cache_manager
        while self.waiting and budget > 0 and len(self.running) < self.max_num_seqs:
            request = self.waiting[0]
            hit_blocks: list[KVCacheBlock] = []
            num_hit = 0
            if not request.needs_prompt_rows:  # prompt rows must be computed: no hit then
                hit_blocks, num_hit = manager.get_computed_blocks(request)
            num_new = min(request.num_tokens - num_hit, budget)
            if num_new < 1:
                raise AssertionError(f"request {request.request_id!r}: prefix hit covers it all")
            if manager.allocate_slots(request, num_new, hit_blocks) is None:
                break
            self.waiting.popleft()
            request.status = RequestStatus.RUNNING
            request.num_computed_tokens = num_hit
            self.running.append(request)
            if not request.needs_prompt_rows:
                self.prefix_cache_queries += request.num_tokens
                self.prefix_cache_hits += num_hit
            scheduled.append(self._scheduled(request, num_new))
            budget -= num_new
        return budget

    def _scheduled(self, request: Request, num_new: int) -> ScheduledRequest:
        start = request.num_computed_tokens
        end = start + num_new
        return ScheduledRequest(
            request_id=request.request_id,
            token_ids=tuple(request.all_token_ids[start:end]),
            start_position=start,
            block_table=self.kv_cache_manager.get_block_ids(request.request_id),
            sample=end == request.num_tokens,
            all_rows=request.needs_prompt_rows and start < request.num_prompt_tokens - 1,
        )

    def schedule_ahead(self, prev: SchedulerOutput) -> SchedulerOutput | None:
        """Plan the step after `prev` before prev's sampled tokens are appended (module
        docstring): each running request not ended by length gets one token at position
        `num_tokens`, a placeholder. None, with nothing changed, when the step would not only
        continue prev (a waiting request, a running one prev did not sample, an outstanding
        placeholder) or the free blocks or the token budget do not cover it; the caller then
        schedules normally after prev's update."""
        requests = self._ahead_requests(prev)
        if not requests:
            return None
        manager = self.kv_cache_manager
        for request in requests:
            request.num_output_placeholders = 1
            num_new = request.num_tokens + 1 - request.num_computed_tokens
            if manager.allocate_slots(request, num_new) is None:  # checked by _ahead_requests
                raise AssertionError(f"request {request.request_id!r}: ahead allocation failed")
        scheduled = tuple(self._scheduled_ahead(request) for request in requests)
        return SchedulerOutput(scheduled=scheduled, preempted=(), num_batched_tokens=len(scheduled))

    def _ahead_requests(self, prev: SchedulerOutput) -> list[Request]:
        """The requests of the step ahead of `prev`, or [] when it does not qualify."""
        if self.waiting:
            return []
        sampled = {s.request_id: s for s in prev.scheduled if s.sample}
        for request in self.running:
            item = sampled.get(request.request_id)
            if (
                item is None
                or request.num_output_placeholders
                or request.num_computed_tokens != item.start_position
                or item.start_position + len(item.token_ids) != request.num_tokens
            ):
                return []
        requests = [r for r in self.running if not _ends_by_length_next(r)]
        if len(requests) > self.max_num_batched_tokens:
            return []
        needed = sum(self._blocks_to_grow(r, r.num_tokens + 1) for r in requests)
        return requests if needed <= self.kv_cache_manager.num_free_blocks else []

    def _blocks_to_grow(self, request: Request, num_tokens: int) -> int:
        """New blocks the request's table needs to cover `num_tokens` positions."""
        held = self.kv_cache_manager.num_blocks(request.request_id)
        return max(cdiv(num_tokens, self.block_size) - held, 0)

    def _scheduled_ahead(self, request: Request) -> ScheduledRequest:
        return ScheduledRequest(
            request_id=request.request_id,
            token_ids=(PLACEHOLDER_TOKEN,),
            start_position=request.num_tokens,
            block_table=self.kv_cache_manager.get_block_ids(request.request_id),
            sample=True,
        )

    # ------------------------------------------------------------------ results

    def update_from_output(self, out: SchedulerOutput, sampled: Mapping[str, int]) -> list[Request]:
        """Apply a computed step: advance `num_computed_tokens`, cache the newly full blocks,
        append the sampled tokens (one per `sample=True` request), finish requests on a stop
        token or a length limit and free their blocks. Requests finished from outside since
        `schedule()` are skipped. Returns the requests finished here."""
        finished: list[Request] = []
        for item in out.scheduled:
            request = self.requests.get(item.request_id)
            if request is None or request.status is not RequestStatus.RUNNING:
                continue
            self._advance(request, item)
            if item.sample:
                status = self._append_sampled(request, sampled)
                if status is not None:
                    finished.append(request)
                    self._finish(request, status)
        if finished:
            self.running = [r for r in self.running if not r.is_finished]
        return finished

    def _advance(self, request: Request, item: ScheduledRequest) -> None:
        if request.num_computed_tokens != item.start_position:
            raise ValueError(
                f"request {item.request_id!r}: output starts at {item.start_position}, "
                f"request has {request.num_computed_tokens} computed tokens"
            )
        request.num_computed_tokens += len(item.token_ids)
        self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens)

    def _append_sampled(self, request: Request, sampled: Mapping[str, int]) -> RequestStatus | None:
        token_id = sampled.get(request.request_id)
        if token_id is None:
            raise ValueError(f"sampled has no token for request {request.request_id!r}")
        request.append_output_token_id(token_id)
        return request.check_stop(token_id)

    # ------------------------------------------------------------------ checks

    def check_integrity(self) -> None:
        """Raise AssertionError naming the first broken invariant (class docstring, plus
        `KVCacheManager.check_integrity`)."""
        self.kv_cache_manager.check_integrity()
        running_ids = [r.request_id for r in self.running]
        waiting_ids = [r.request_id for r in self.waiting]
        held = list(self.kv_cache_manager.held_request_ids())
        if sorted(held) != sorted(running_ids):
            raise AssertionError(f"block holders {held} are not the running requests {running_ids}")
        if len(self.running) > self.max_num_seqs:
            raise AssertionError(f"{len(self.running)} running requests > max_num_seqs")
        if sorted(running_ids + waiting_ids) != sorted(self.requests):
            raise AssertionError(
                f"queues (running {running_ids}, waiting {waiting_ids}) do not match "
                f"the unfinished requests {list(self.requests)}"
            )
        for request in self.running:
            self._check_running(request)
        for request in self.waiting:
            self._check_waiting(request)

    @staticmethod
    def _check_running(request: Request) -> None:
        if request.status is not RequestStatus.RUNNING:
            raise AssertionError(f"{request.request_id!r} is running with {request.status}")
        if request.num_computed_tokens >= request.num_tokens:
            raise AssertionError(f"running {request.request_id!r} has nothing left to compute")

    @staticmethod
    def _check_waiting(request: Request) -> None:
        waiting = (RequestStatus.WAITING, RequestStatus.PREEMPTED)
        if request.status not in waiting or request.num_computed_tokens != 0:
            raise AssertionError(
                f"waiting request {request.request_id!r} is {request.status} with "
                f"{request.num_computed_tokens} computed tokens"
            )


def _ends_by_length_next(request: Request) -> bool:
    """Whether the next sampled token ends the request by a length limit (`check_stop`)."""
    limit = request.max_model_len
    return request.num_output_tokens + 1 >= request.max_tokens or (
        limit is not None and request.num_tokens + 1 >= limit
    )
