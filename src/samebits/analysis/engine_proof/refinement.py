"""Refinement check: the real engine core takes only proved transitions (within bounds).

`RefinementModel` is the model checker's `Model` (`analysis/world.py`) with one more check
on every explored action. Before and after each action, and between `schedule()` and the
runner, the real state (`Scheduler`, `KVCacheManager`, `BlockPool`, the symbolic runner's
KV slots) is mapped to an abstract `State` (`abstract_state`). The action is replayed as a
sequence of the proved transitions, with arguments read off the real step (which request
was preempted or admitted, the hit blocks, the blocks allocated, the chunk, the sampled
token); each transition's guard must hold and its update is applied, evaluated concretely
with `PyLogic` (no Z3). The result must equal the mapped real state after the action, field
by field (ghost witnesses aside), the mapped state must satisfy the invariant, and every
block's ref_cnt must equal the number of tables holding it. The free queue's order (a
policy the proof does not need) is followed too: released blocks join the tail in the
order the engine frees them, allocation takes the head.

Mapping: prefix values of KV slots are recognized by their symbolic digests (each position's
K/V digests in a cold, contiguous recomputation of a request's tokens); a real block hash is
mapped to the abstract chained hash of the block it was computed for, and two prefixes with
one digest are a refinement failure (the real hash is not the collision-free chain).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from samebits.analysis.engine_proof import invariant as inv
from samebits.analysis.engine_proof import transitions as tr
from samebits.analysis.engine_proof.logic import NO_BLOCK, PAD, FMap, PyLogic
from samebits.analysis.engine_proof.state import State, field_names
from samebits.analysis.symbolic_model import attend, embed, kv_entry, mlp, sample
from samebits.analysis.world import Model, Violation, World, _index, _rid
from samebits.engine import prefix_hash
from samebits.engine.request import Request, RequestStatus
from samebits.engine.scheduler import SchedulerOutput

_STATUS = {
    RequestStatus.WAITING: 1,
    RequestStatus.PREEMPTED: 1,
    RequestStatus.RUNNING: 2,
}


@dataclass
class RefinementWorld(World):
    """A `World` that remembers every request it created (finished ones too)."""

    known: dict[int, Request] = field(default_factory=dict)


@dataclass
class Coverage:
    """How many abstract transitions each real action was replayed as, by name."""

    transitions: dict[str, int] = field(default_factory=dict)
    checked_states: int = 0

    def add(self, name: str) -> None:
        self.transitions[name] = self.transitions.get(name, 0) + 1


@functools.cache
def reference_kv(tokens: tuple[int, ...], num_layers: int) -> tuple[tuple[bytes, ...], ...]:
    """Per position, the K/V digests of every layer in a cold, contiguous forward."""
    hidden = [embed(t, p) for p, t in enumerate(tokens)]
    per_layer = []
    for layer in range(num_layers):
        kv = [kv_entry(layer, h) for h in hidden]
        per_layer.append(kv)
        hidden = [mlp(layer, h, attend(layer, kv[: p + 1])) for p, h in enumerate(hidden)]
    return tuple(zip(*per_layer, strict=True))


class Abstraction:
    """Maps one real `RefinementWorld` to a `PyLogic` and an abstract `State`."""

    def __init__(self, model: RefinementModel, world: RefinementWorld) -> None:
        self.model, self.world = model, world
        c = model.config
        self.B, self.num_blocks = c.block_size, c.num_kv_blocks
        self.requests = range(len(c.requests))
        self.tokens = {i: tuple(world.known[i].all_token_ids) for i in world.known}
        self.L = self._logic()
        self.F = {i: self._chain(i, self.L.link, self.L.root) for i in self.requests}
        self.H = {i: self._chain(i, self.L.chain_hash, self.L.hash_root) for i in self.requests}
        self.digest_to_hash = self._digests()
        self.values = self._values()

    def _logic(self) -> PyLogic:
        longest = max([len(t) for t in self.tokens.values()] + [0])
        domains = {
            "req": self.requests,
            "blk": range(self.num_blocks),
            "idx": range(-1, longest // self.B + 2),
            "off": range(-1, self.B + 1),
        }
        return PyLogic(self.B, domains)

    def _chain(self, i: int, step: Any, root: Any) -> FMap:
        tokens = self.tokens.get(i, ())
        out, prev = {-1: root}, root
        for k in range(len(tokens) // self.B):
            prev = step(prev, tokens[k * self.B : (k + 1) * self.B])
            out[k] = prev
        return FMap.of(out, root)

    def _digests(self) -> dict[bytes, Any]:
        salt = self.world.scheduler.kv_cache_manager.cache_salt
        out: dict[bytes, Any] = {}
        for i, tokens in self.tokens.items():
            for k, real in enumerate(prefix_hash.compute_block_hashes(tokens, self.B, salt)):
                term = self.H[i][k]
                if out.setdefault(real.digest, term) != term:
                    raise Violation(
                        "refinement",
                        f"block hash {real.digest.hex()[:12]} stands for two different "
                        f"prefixes (request r{i} block {k} and another): not a chained hash",
                    )
        return out

    def _values(self) -> dict[tuple[bytes, ...], Any]:
        """K/V digests of every prefix of every known request -> its abstract prefix value."""
        out = {}
        layers = self.model.config.num_layers
        for tokens in self.tokens.values():
            for p, digests in enumerate(reference_kv(tokens, layers)):
                out[digests] = self.prefix_value(tokens[: p + 1])
        return out

    def prefix_value(self, tokens: Sequence[int]) -> Any:
        L, B = self.L, self.B
        i, o = divmod(len(tokens) - 1, B)
        chain = L.root
        for k in range(i):
            chain = L.link(chain, tuple(tokens[k * B : (k + 1) * B]))
        block = tuple(tokens[i * B : i * B + o + 1]) + (PAD,) * (B - o - 1)
        return L.pv(chain, block)

    # ------------------------------------------------------------------ the state

    def state(self) -> State:
        reqs = {i: self._request(i) for i in self.requests}
        blocks = [self._block(b) for b in range(self.num_blocks)]
        pool = self.world.scheduler.kv_cache_manager.block_pool
        hmap = {self._hash(d): b.block_id for d, b in pool.cached_block_hash_to_block.items()}
        fields_ = {name: _fmap(reqs, name) for name in reqs[0]}
        fields_.update({name: _fmap(dict(enumerate(blocks)), name) for name in blocks[0]})
        self.L.domains["hash"] = (*hmap, *self.H_terms())
        return State(**fields_, hmap=FMap.of(hmap, NO_BLOCK))

    def H_terms(self) -> list[Any]:
        return [self.H[i][k] for i in self.requests for k in self.L.domains["idx"]]

    def _request(self, i: int) -> dict[str, Any]:
        request = self.world.known.get(i)
        tokens = self.tokens.get(i, ())
        st = 0 if request is None else _STATUS.get(request.status, 3)
        computed = request.num_computed_tokens if request is not None else 0
        manager = self.world.scheduler.kv_cache_manager
        table = manager.get_block_ids(_rid(i)) if request is not None else ()
        li, lo = divmod(len(tokens), self.B)
        ci, co = divmod(computed, self.B)
        return {
            "st": st, "li": li, "lo": lo, "ci": ci, "co": co, "nb": len(table),
            "tab": FMap.of(dict(enumerate(table)), NO_BLOCK),
            "pos": FMap.of({b: k for k, b in enumerate(table)}, -1),
            "rowc": st == 2 and (ci, co) == (li, lo),
            "tok": self._tokens(tokens), "F": self.F[i], "H": self.H[i],
        }  # fmt: skip

    def _tokens(self, tokens: tuple[int, ...]) -> FMap:
        B, n = self.B, len(tokens)

        def block(i: int) -> FMap:
            return FMap(lambda o: tokens[i * B + o] if 0 <= o < B and 0 <= i * B + o < n else PAD)

        return FMap(block)

    def _block(self, b: int) -> dict[str, Any]:
        pool = self.world.scheduler.kv_cache_manager.block_pool
        block = pool.blocks[b]
        digest = block.block_hash.digest if block.block_hash is not None else None
        hsh = self._hash(digest) if digest is not None else self.L.hash_root
        own = self._owner(hsh) if digest is not None else (0, 0)
        kv = {o: self._slot(b * self.B + o) for o in range(self.B)}
        return {
            "ref": block.ref_cnt, "free": b in pool.free_block_queue,
            "cached": digest is not None, "hsh": hsh, "kv": FMap.of(kv, ("junk", "pad")),
            "own_r": own[0], "own_i": own[1],
        }  # fmt: skip

    def _hash(self, digest: bytes) -> Any:
        if digest not in self.digest_to_hash:
            raise Violation("refinement", f"cached digest {digest.hex()[:12]} of no known prefix")
        return self.digest_to_hash[digest]

    def _owner(self, h: Any) -> tuple[int, int]:
        """A request and block index whose chained hash is h (the ghost witness)."""
        for i in self.requests:
            for k in range(len(self.tokens.get(i, ())) // self.B):
                if self.H[i][k] == h:
                    return i, k
        return 0, 0

    def _slot(self, slot: int) -> Any:
        digests = tuple(layer[slot] for layer in self.world.runner.kv)
        if any(d is None for d in digests):
            return ("junk", "unwritten", slot)
        return self.values.get(digests, ("junk", "unknown", slot))


def _fmap(items: dict[int, dict[str, Any]], name: str) -> FMap:
    return FMap.of({k: v[name] for k, v in items.items()}, items[0][name])


# ---------------------------------------------------------------------- comparison, checks

_GHOST_WITNESSES = {"own_r", "own_i"}


def difference(L: PyLogic, a: State, b: State) -> str | None:
    """The first field where two concrete states differ (witness fields aside)."""
    for name in field_names():
        if name in _GHOST_WITNESSES:
            continue
        for key in _keys(L, a, name):
            x, y = _value(L, a, name, key), _value(L, b, name, key)
            if x != y:
                return f"{name}{list(key)}: replayed {x!r}, real {y!r}"
    return None


def _keys(L: PyLogic, s: State, name: str) -> Iterable[tuple[Any, ...]]:
    d = L.domains
    shapes = {
        "tab": ("req", "idx"), "pos": ("req", "blk"), "tok": ("req", "idx", "off"),
        "F": ("req", "idx"), "H": ("req", "idx"), "kv": ("blk", "off"), "hmap": ("hash",),
    }  # fmt: skip
    kinds = shapes.get(name, ("blk",) if name in ("ref", "free", "cached", "hsh") else ("req",))
    keys: list[tuple[Any, ...]] = [()]
    for kind in kinds:
        keys = [(*k, x) for k in keys for x in d[kind]]
    return keys


def _value(L: PyLogic, s: State, name: str, key: tuple[Any, ...]) -> Any:
    if name == "tab" and not 0 <= key[1] < s.nb[key[0]]:
        return None  # entries past the table's end mean nothing
    if name == "hsh" and not s.cached[key[0]]:
        return None
    if name == "kv" and not 0 <= key[1] < L.B:
        return None
    value = getattr(s, name)
    for k in key:
        value = value[k]
    return value


def check_invariant(L: PyLogic, s: State, where: str) -> None:
    for name, holds in inv.invariant(L, s).items():
        if not holds:
            raise Violation("refinement", f"{where}: the mapped state breaks invariant {name}")
    for b in L.domains["blk"]:
        holders = sum(s.pos[r][b] >= 0 for r in L.domains["req"])
        if s.ref[b] != holders:
            raise Violation("refinement", f"{where}: block {b} ref_cnt {s.ref[b]} != {holders}")


# ---------------------------------------------------------------------- replay


class Replay:
    """Applies proved transitions to a mapped state, checking each guard, and follows the
    free queue's order alongside."""

    def __init__(self, L: PyLogic, s: State, queue: Sequence[int], coverage: Coverage) -> None:
        self.L, self.s, self.queue, self.coverage = L, s, list(queue), coverage

    def take(self, name: str, *args: Any) -> None:
        transition = tr.BY_NAME[name]
        guard, post = transition.step(self.L, self.s, *args)
        if not guard:
            raise Violation("refinement", f"the real step takes {name}{args}: guard false")
        self._queue(name, args)
        self.s = post
        self.coverage.add(name)

    def _queue(self, name: str, args: tuple[Any, ...]) -> None:
        s = self.s
        if name in ("preempt", "abort", "finish"):
            table = [s.tab[args[0]][k] for k in range(s.nb[args[0]])]
            self.queue += [b for b in reversed(table) if s.ref[b] == 1]
        elif name == "hit" and args[1] in self.queue:
            self.queue.remove(args[1])
        elif name == "allocate":
            if not self.queue or self.queue[0] != args[1]:
                raise Violation(
                    "refinement",
                    f"allocation takes block {args[1]}, the free queue's head is "
                    f"{self.queue[:1]} (LRU order)",
                )
            self.queue.pop(0)


class RefinementModel(Model):
    """The model checker's model plus the refinement check on every action. With
    `behaviour_checks=False` the spec and contract checks are off too (tokens are still
    sampled from the rows), so the refinement check alone judges the engine."""

    def __init__(
        self, config: Any, structural_checks: bool = True, behaviour_checks: bool = True
    ) -> None:
        if config.lookahead:
            raise ValueError(
                f"config {config.name!r}: the refinement map covers synchronous steps; steps "
                "scheduled ahead are model-checked (docs/engine_proof.md, 'Lookahead')"
            )
        super().__init__(config, structural_checks)
        self.behaviour_checks = behaviour_checks
        self.replay_coverage = Coverage()

    def _check_output(self, world: World, out: SchedulerOutput) -> None:
        if self.behaviour_checks:
            super()._check_output(world, out)

    def _check_rows(self, world: World, rows: dict[str, bytes]) -> dict[str, int]:
        if self.behaviour_checks:
            return super()._check_rows(world, rows)
        requests = world.scheduler.requests
        vocab = self.config.vocab_size
        return {
            rid: sample(row, requests[rid].seed, requests[rid].num_output_tokens, vocab)
            for rid, row in rows.items()
        }

    def _check_finished(self, world: World, request: Request) -> None:
        if self.behaviour_checks:
            super()._check_finished(world, request)
        else:
            world.outcome[_index(request.request_id)] = request.finish_reason or "stop"

    def _check_terminal(self, world: World) -> None:
        if self.behaviour_checks:
            super()._check_terminal(world)

    def initial(self) -> RefinementWorld:
        w = super().initial()
        return RefinementWorld(w.scheduler, w.runner, w.pending, w.aborts_left, w.outcome)

    def _map(self, world: RefinementWorld) -> tuple[PyLogic, State, list[int]]:
        abstraction = Abstraction(self, world)
        queue = list(world.scheduler.kv_cache_manager.block_pool.free_block_queue)
        self.replay_coverage.checked_states += 1
        return abstraction.L, abstraction.state(), queue

    def _finish_replay(self, replay: Replay, world: RefinementWorld, where: str) -> None:
        L, real, queue = self._map(world)
        L.domains["hash"] = (*L.domains["hash"], *replay.L.domains.get("hash", ()))
        found = difference(L, replay.s, real)
        if found is not None:
            raise Violation("refinement", f"{where}: {found}")
        if replay.queue != queue:
            raise Violation("refinement", f"{where}: free queue {queue}, replayed {replay.queue}")
        check_invariant(L, real, where)

    def _add(self, world: RefinementWorld, index: int) -> None:
        L, s, queue = self._map(world)
        super()._add(world, index)
        world.known[index] = world.scheduler.requests[_rid(index)]
        replay = Replay(L, s, queue, self.replay_coverage)
        for token in self.config.requests[index].prompt:
            replay.take("prompt_token", index, token)
        replay.take("arrive", index)
        self._finish_replay(replay, world, f"add({index})")

    def _abort(self, world: RefinementWorld, index: int) -> None:
        L, s, queue = self._map(world)
        super()._abort(world, index)
        replay = Replay(L, s, queue, self.replay_coverage)
        replay.take("abort", index)
        self._finish_replay(replay, world, f"abort({index})")

    def _step(self, world: RefinementWorld, budget: int) -> None:
        scheduler = world.scheduler
        scheduler.max_num_batched_tokens = budget
        hits_before = scheduler.prefix_cache_hits
        L, s, queue = self._map(world)
        waiting = {_index(r.request_id) for r in scheduler.waiting}
        out = scheduler.schedule()
        self._check_integrity(world)
        self._check_output(world, out)
        replay = Replay(L, s, queue, self.replay_coverage)
        self._replay_schedule(replay, world, out, waiting)
        self._finish_replay(replay, world, "schedule()")
        num_cached = dict(scheduler.kv_cache_manager.num_cached_blocks)
        L, s, queue = self._map(world)
        replay = Replay(L, s, queue, self.replay_coverage)
        self._replay_writes(replay, out)  # guards judged before the runner touches a slot
        rows, written = world.runner.execute(out)
        if self.structural_checks:
            self._check_writes(world, written)
        sampled = self._check_rows(world, rows)
        finished = scheduler.update_from_output(out, sampled)
        for request in finished:
            self._check_finished(world, request)
        self._replay_update(replay, out, sampled, num_cached, finished)
        self._finish_replay(replay, world, "runner + update_from_output()")
        self._count(out, scheduler.prefix_cache_hits > hits_before)

    def _replay_schedule(
        self, replay: Replay, world: RefinementWorld, out: SchedulerOutput, waiting: set[int]
    ) -> None:
        """Preemptions first (the free queue is FIFO, so freeing before the allocations that
        preceded them pops the same blocks), then per scheduled request in batch order:
        admission, prefix hits, evictions and allocations of its new blocks."""
        for rid in out.preempted:
            replay.take("preempt", _index(rid))
        manager = world.scheduler.kv_cache_manager
        for item in out.scheduled:
            r = _index(item.request_id)
            if r in waiting:
                replay.take("admit", r)
                table = manager.get_block_ids(item.request_id)
                for k in range(item.start_position // self.config.block_size):
                    replay.take("hit", r, table[k])
            table = manager.get_block_ids(item.request_id)
            for b in table[replay.s.nb[r] :]:
                if replay.s.cached[b]:
                    replay.take("evict", b)
                replay.take("allocate", r, b)

    def _replay_writes(self, replay: Replay, out: SchedulerOutput) -> None:
        """The runner computes every scheduled chunk."""
        for item in out.scheduled:
            end = divmod(item.start_position + len(item.token_ids), self.config.block_size)
            replay.take("write", _index(item.request_id), *end)

    def _replay_update(
        self,
        replay: Replay,
        out: SchedulerOutput,
        sampled: dict[str, int],
        num_cached: dict[str, int],
        finished: list[Request],
    ) -> None:
        """After the runner's writes, per request: block completion and caching, the sampled
        token, the finish."""
        size = self.config.block_size
        done = {request.request_id for request in finished}
        for item in out.scheduled:
            r = _index(item.request_id)
            full = (item.start_position + len(item.token_ids)) // size
            for k in range(num_cached.get(item.request_id, full), full):
                if tr.cache_guard(replay.L, replay.s, r, k):
                    replay.take("cache", r, k)
            if item.sample:
                replay.take("decode_append", r, sampled[item.request_id])
            if item.request_id in done:
                replay.take("finish", r)


def check_refinement(
    config: Any, structural_checks: bool = True, behaviour_checks: bool = True
) -> tuple[Any, Coverage]:
    """Explore every execution of `config` (the model checker's search) with the refinement
    check on every action; returns the `CheckResult` and which transitions were replayed."""
    from samebits.analysis.model_checker import _DepthFirstSearch

    model = RefinementModel(config, structural_checks, behaviour_checks)
    return _DepthFirstSearch(model).run(), model.replay_coverage
