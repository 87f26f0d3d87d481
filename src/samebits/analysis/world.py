"""The transition system the model checker explores: the real `Scheduler` (with its real
`KVCacheManager` and `BlockPool`), the `SymbolicRunner` and an environment that adds and
aborts requests.

Actions: `("add", i)` request i arrives; `("abort", i)` request i is aborted (at most
`max_aborts` per execution); `("step", b)` one engine step with token budget b; with
`lookahead` also `("ahead", b)`: the engine step of async scheduling with lookahead, which
after launching (or taking the step in flight) asks `Scheduler.schedule_ahead` for the next
step and, if it comes, launches it before this step's update, fed with this step's sampled
tokens (what the device argmax feeds); that step is in flight until the next step action.
Launched steps run on the runner at launch (stream order); adds and aborts may come between
a step in flight and its update. Every
transition is checked against the spec (each logits row and token equals the request's
reference at that output index; a finished request's outputs and finish status are the
reference cut by its stop rules), the runner contract, write discipline (a step writes only
into blocks its request alone holds and that are not in the prefix cache), progress (a step
with unfinished requests schedules a token) and `Scheduler.check_integrity()`.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass

from samebits.analysis.scenarios import CheckConfig, RequestSpec
from samebits.analysis.symbolic_model import (
    ContractViolation,
    ReferenceView,
    SymbolicRunner,
    reference_view,
    sample,
)
from samebits.engine.kv_cache_manager import cdiv
from samebits.engine.request import Request, RequestStatus
from samebits.engine.scheduler import PLACEHOLDER_TOKEN, Scheduler, SchedulerOutput

Action = tuple[str, int]

_OUTCOMES = {
    RequestStatus.FINISHED_STOPPED: "stop",
    RequestStatus.FINISHED_LENGTH: "length",
    RequestStatus.FINISHED_ABORTED: "abort",
}


class Violation(Exception):
    """A checked property failed. `kind` is one of: spec (rows, tokens, finish vs the
    reference), contract (scheduler -> runner), write (write discipline), integrity
    (`check_integrity` or an engine assertion), progress, livelock, crash (any other
    exception raised by the engine core)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"[{kind}] {message}")
        self.kind = kind
        self.message = message


@dataclass
class World:
    """Mutable state of one execution (picklable: the checker snapshots it)."""

    scheduler: Scheduler
    runner: SymbolicRunner
    pending: tuple[int, ...]
    aborts_left: int
    outcome: list[str]
    inflight: tuple[SchedulerOutput, dict[str, bytes]] | None = None  # scheduled ahead, run


@dataclass
class Coverage:
    """How often interesting events happened over all explored transitions."""

    steps: int = 0
    preempting_steps: int = 0
    prefix_hit_admissions: int = 0
    chunked_prefills: int = 0
    aborts_running: int = 0
    aborts_waiting: int = 0
    finished_stop: int = 0
    finished_length: int = 0
    max_batch_size: int = 0
    ahead_steps: int = 0
    wasted_rows: int = 0  # rows of a step in flight whose request ended before its update


class Model:
    """Builds, steps and fingerprints `World`s of one `CheckConfig`. With
    `structural_checks=False` only behaviour is checked (spec, contract, progress): no
    `check_integrity()`, no write discipline; used to show what the spec alone catches."""

    def __init__(self, config: CheckConfig, structural_checks: bool = True) -> None:
        self.config = config
        self.structural_checks = structural_checks
        self.refs = [
            reference_view(s.prompt, s.seed, s.max_tokens, config.num_layers, config.vocab_size)
            for s in config.requests
        ]
        self.coverage = Coverage()

    def initial(self) -> World:
        c = self.config
        scheduler = Scheduler(
            max_num_seqs=c.max_num_seqs,
            max_num_batched_tokens=max(c.step_budgets),
            max_model_len=c.max_model_len,
            block_size=c.block_size,
            num_kv_blocks=c.num_kv_blocks,
            enable_prefix_caching=c.enable_prefix_caching,
            cache_salt=b"model-checker",
        )
        runner = SymbolicRunner(c.num_layers, c.num_kv_blocks, c.block_size)
        pending = tuple(range(len(c.requests)))
        return World(scheduler, runner, pending, c.max_aborts, ["pending"] * len(pending))

    def actions(self, world: World) -> list[Action]:
        """Enabled actions, in a fixed order (the DFS order)."""
        acts: list[Action] = [("add", i) for i in world.pending]
        if world.aborts_left:
            acts += [("abort", i) for i, o in enumerate(world.outcome) if o == "active"]
        if world.scheduler.has_unfinished_requests():
            acts += [("step", b) for b in self.config.step_budgets]
            if self.config.lookahead:
                acts += [("ahead", b) for b in self.config.step_budgets]
        return acts

    def apply(self, world: World, action: Action) -> None:
        """Perform `action`; raise `Violation` when a checked property fails."""
        kind, arg = action
        try:
            if kind == "add":
                self._add(world, arg)
            elif kind == "abort":
                self._abort(world, arg)
            elif kind == "ahead":
                self._step(world, arg, ahead=True)
            else:
                self._step(world, arg)
            self._check_integrity(world)
        except Violation:
            raise
        except ContractViolation as exc:
            raise Violation("contract", str(exc)) from exc
        except AssertionError as exc:
            raise Violation("integrity", str(exc)) from exc
        except Exception as exc:
            raise Violation("crash", f"{type(exc).__name__}: {exc}") from exc
        if not world.pending and not world.scheduler.has_unfinished_requests():
            self._check_terminal(world)

    # ------------------------------------------------------------------ actions

    def _add(self, world: World, index: int) -> None:
        spec = self.config.requests[index]
        world.scheduler.add_request(_make_request(index, spec))
        world.pending = tuple(i for i in world.pending if i != index)
        world.outcome[index] = "active"

    def _abort(self, world: World, index: int) -> None:
        rid = _rid(index)
        request = world.scheduler.requests[rid]
        if request.status is RequestStatus.RUNNING:
            self.coverage.aborts_running += 1
        else:
            self.coverage.aborts_waiting += 1
        world.scheduler.finish_request(rid, RequestStatus.FINISHED_ABORTED)
        world.aborts_left -= 1
        world.outcome[index] = "abort"

    def _step(self, world: World, budget: int, ahead: bool = False) -> None:
        scheduler = world.scheduler
        scheduler.max_num_batched_tokens = budget
        if world.inflight is None:
            out, rows = self._launch(world)
        else:
            (out, rows), world.inflight = world.inflight, None
            self.coverage.wasted_rows += sum(rid not in scheduler.requests for rid in rows)
        sampled = self._check_rows(world, rows)
        if ahead:
            world.inflight = self._launch_ahead(world, out, sampled)
        for request in scheduler.update_from_output(out, sampled):
            self._check_finished(world, request)

    def _launch(self, world: World) -> tuple[SchedulerOutput, dict[str, bytes]]:
        """Schedule a step and run it (contract, writes and integrity checked)."""
        scheduler = world.scheduler
        hits_before = scheduler.prefix_cache_hits
        out = scheduler.schedule()
        self._check_integrity(world)
        self._check_output(world, out)
        rows = self._run(world, out)
        self._count(out, scheduler.prefix_cache_hits > hits_before)
        return out, rows

    def _run(self, world: World, out: SchedulerOutput) -> dict[str, bytes]:
        rows, written = world.runner.execute(out)
        if self.structural_checks:
            self._check_writes(world, written)
        return rows

    def _launch_ahead(self, world: World, prev: SchedulerOutput, sampled: dict[str, int]):
        """The step after `prev`, scheduled before prev's update and run on prev's sampled
        tokens (the feed), or None when the scheduler declines."""
        out = world.scheduler.schedule_ahead(prev)
        if out is None:
            return None
        self._check_integrity(world)
        self._check_ahead_output(world, out)
        fed = tuple(
            dataclasses.replace(item, token_ids=(self._fed_token(sampled, item.request_id),))
            for item in out.scheduled
        )
        rows = self._run(world, dataclasses.replace(out, scheduled=fed))
        self.coverage.ahead_steps += 1
        self._count(out, False)
        return out, rows

    # ------------------------------------------------------------------ checks

    def _check_integrity(self, world: World) -> None:
        if self.structural_checks:
            world.scheduler.check_integrity()

    def _check_output(self, world: World, out: SchedulerOutput) -> None:
        scheduler = world.scheduler
        if not out.scheduled:
            raise Violation("progress", "a step with unfinished requests scheduled nothing")
        total = 0
        for item in out.scheduled:
            request = scheduler.requests[item.request_id]
            start, end = item.start_position, item.start_position + len(item.token_ids)
            if start != request.num_computed_tokens or not item.token_ids:
                raise Violation("contract", f"{item.request_id}: chunk starts at {start}")
            if item.token_ids != tuple(request.all_token_ids[start:end]):
                raise Violation("contract", f"{item.request_id}: wrong token_ids {item.token_ids}")
            if item.sample != (end == request.num_tokens):
                raise Violation("contract", f"{item.request_id}: sample={item.sample} at {end}")
            table = item.block_table
            if table != scheduler.kv_cache_manager.get_block_ids(item.request_id):
                raise Violation("contract", f"{item.request_id}: block table is not its table")
            if len(table) != cdiv(end, scheduler.block_size):
                raise Violation("contract", f"{item.request_id}: table {table} for {end} tokens")
            total += len(item.token_ids)
        if total != out.num_batched_tokens or total > scheduler.max_num_batched_tokens:
            raise Violation("contract", f"{total} tokens, reported {out.num_batched_tokens}")

    @staticmethod
    def _fed_token(sampled: dict[str, int], request_id: str) -> int:
        """The input token of a step scheduled ahead: the request's token of the step before
        (the runner's device gather)."""
        return sampled[request_id]

    def _check_ahead_output(self, world: World, out: SchedulerOutput) -> None:
        """A step scheduled ahead: one placeholder token per request at its next position,
        reserved, with a table covering exactly that position, within the budget."""
        scheduler = world.scheduler
        for item in out.scheduled:
            request = scheduler.requests[item.request_id]
            start, rid = item.start_position, item.request_id
            if item.token_ids != (PLACEHOLDER_TOKEN,) or not item.sample or item.all_rows:
                raise Violation("contract", f"{rid}: ahead item {item}")
            if start != request.num_tokens or request.num_output_placeholders != 1:
                raise Violation("contract", f"{rid}: ahead at {start}, {request.num_tokens} known")
            table = item.block_table
            if table != scheduler.kv_cache_manager.get_block_ids(rid):
                raise Violation("contract", f"{rid}: block table is not its table")
            if len(table) != cdiv(start + 1, scheduler.block_size):
                raise Violation("contract", f"{rid}: table {table} for {start + 1} tokens")
        total = len(out.scheduled)
        if total != out.num_batched_tokens or total > scheduler.max_num_batched_tokens:
            raise Violation("contract", f"ahead: {total} tokens, reported {out.num_batched_tokens}")

    def _check_writes(self, world: World, written: list[int]) -> None:
        """Each written slot is written once per step, in a block held by exactly one request
        and not registered in the prefix cache (cached blocks are immutable)."""
        if len(set(written)) != len(written):
            raise Violation("write", f"a slot is written twice in one step: {written}")
        blocks = world.scheduler.kv_cache_manager.block_pool.blocks
        for slot in written:
            block = blocks[slot // self.config.block_size]
            if block.ref_cnt != 1 or block.block_hash is not None:
                raise Violation(
                    "write",
                    f"write into block {block.block_id} (ref_cnt {block.ref_cnt}, "
                    f"cached {block.block_hash is not None})",
                )

    def _check_rows(self, world: World, rows: dict[str, bytes]) -> dict[str, int]:
        """Each live request's row against its reference; its sampled token. (A row of a
        request that ended since its step was launched is dropped, as the engine does.)"""
        sampled = {}
        for rid, row in rows.items():
            index = _index(rid)
            request = world.scheduler.requests.get(rid)
            if request is None:
                continue
            position = request.num_output_tokens
            ref = self.refs[index]
            if position >= len(ref.rows) or row != ref.rows[position]:
                raise Violation("spec", f"{rid}: logits row {position} differs from the reference")
            token = sample(row, request.seed, position, self.config.vocab_size)
            if token != ref.tokens[position]:
                raise Violation("spec", f"{rid}: token {position} differs from the reference")
            sampled[rid] = token
        return sampled

    def _check_finished(self, world: World, request: Request) -> None:
        index = _index(request.request_id)
        spec = self.config.requests[index]
        tokens, status = expected_outputs(spec, self.refs[index], request.max_model_len)
        if tuple(request.output_token_ids) != tokens or request.status is not status:
            raise Violation(
                "spec",
                f"{request.request_id} finished {request.status.name} with "
                f"{request.output_token_ids}, reference says {status.name} with {list(tokens)}",
            )
        world.outcome[index] = _OUTCOMES[status]
        if status is RequestStatus.FINISHED_STOPPED:
            self.coverage.finished_stop += 1
        else:
            self.coverage.finished_length += 1

    def _check_terminal(self, world: World) -> None:
        pool = world.scheduler.kv_cache_manager.block_pool
        if self.structural_checks and pool.num_free_blocks != pool.num_blocks:
            raise Violation("integrity", "blocks still held after every request finished")
        unfinished = [i for i, o in enumerate(world.outcome) if o in ("pending", "active")]
        if unfinished:
            raise Violation("spec", f"requests {unfinished} never finished")

    def _count(self, out: SchedulerOutput, hit: bool) -> None:
        cov = self.coverage
        cov.steps += 1
        cov.preempting_steps += bool(out.preempted)
        cov.prefix_hit_admissions += hit
        cov.chunked_prefills += any(not item.sample for item in out.scheduled)
        cov.max_batch_size = max(cov.max_batch_size, len(out.scheduled))

    # ------------------------------------------------------------------ fingerprint

    def key(self, world: World) -> bytes:
        """Canonical digest of everything that can influence the future of `world`."""
        scheduler = world.scheduler
        manager = scheduler.kv_cache_manager
        pool = manager.block_pool
        waiting = tuple(
            (r.request_id, r.status.value, r.num_output_tokens, r.num_computed_tokens)
            for r in scheduler.waiting
        )
        running = tuple(
            (
                r.request_id,
                r.num_output_tokens,
                r.num_computed_tokens,
                r.num_output_placeholders,
                manager.get_block_ids(r.request_id),
                manager.num_cached_blocks.get(r.request_id),
            )
            for r in scheduler.running
        )
        blocks = tuple(
            (b.ref_cnt, b.block_hash.digest if b.block_hash else None) for b in pool.blocks
        )
        hash_map = tuple(
            sorted((d, b.block_id) for d, b in pool.cached_block_hash_to_block.items())
        )
        state = (
            world.pending,
            world.aborts_left,
            tuple(world.outcome),
            waiting,
            running,
            tuple(pool.free_block_queue),
            blocks,
            hash_map,
            tuple(tuple(layer) for layer in world.runner.kv),
            world.inflight,
        )
        return hashlib.blake2b(repr(state).encode(), digest_size=16).digest()


def expected_outputs(
    spec: RequestSpec, ref: ReferenceView, max_model_len: int
) -> tuple[tuple[int, ...], RequestStatus]:
    """The reference tokens cut by the stop rules, and the finish status they imply
    (written independently of `Request.check_stop`)."""
    tokens: list[int] = []
    for token in ref.tokens:
        tokens.append(token)
        if token in spec.eos_token_ids or token in spec.stop_token_ids:
            return tuple(tokens), RequestStatus.FINISHED_STOPPED
        if len(tokens) == spec.max_tokens or len(spec.prompt) + len(tokens) >= max_model_len:
            return tuple(tokens), RequestStatus.FINISHED_LENGTH
    raise AssertionError("reference shorter than max_tokens")


def _rid(index: int) -> str:
    return f"r{index}"


def _index(request_id: str) -> int:
    return int(request_id[1:])


def _make_request(index: int, spec: RequestSpec) -> Request:
    return Request(
        request_id=_rid(index),
        prompt_token_ids=spec.prompt,
        max_tokens=spec.max_tokens,
        eos_token_ids=spec.eos_token_ids,
        stop_token_ids=spec.stop_token_ids,
        seed=spec.seed,
    )
