"""`samebits verify LOG --ray ADDRESS`: the sampled replays fanned out over Ray actors.

Each actor builds the replay engine once (`engine_factory(engine_args)`, in its own process)
and replays one entry per call with `replay_entry`, exactly as the serial run does. The
driver hands the next entry to whichever actor is free and hands results on in sample (log)
order, whatever order the actors finish in, so the report (its PASS/FAIL lines and summary)
is the serial run's (test: tests/audit/test_verify_ray.py compares the texts).

`address` "auto" starts a local cluster (one CPU per worker) and stops it at the end; any
other value is passed to `ray.init(address=...)` (an existing cluster, e.g. "ray://host:10001"
or "auto" spelled "cluster" to join the local node's running cluster). Every actor must
report the same numerics id (machines may differ) or, without one, the same fingerprint (else
`RayVerifyError`); the refusal check runs against the first actor's.
An actor that dies fails the entry it was replaying (a FAIL line naming the error) and leaves
the pool; the remaining actors go on.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from samebits.audit.reader import LoggedEntry
from samebits.audit.replay import ReplayEngine, ReplayResult, replay_entry

EngineFactory = Callable[[dict[str, Any]], ReplayEngine]
LOCAL = "auto"  # --ray auto: start a local cluster
CLUSTER = "cluster"  # --ray cluster: join the cluster already running on this node


class RayVerifyError(RuntimeError):
    """The Ray pool could not be built or its workers disagree on the deployment."""


@dataclass(frozen=True)
class RayOptions:
    """Where to run: `address` (see module docstring) and the number of replay workers
    (None: one per CPU of the cluster, at least 1)."""

    address: str
    num_workers: int | None = None

    def __post_init__(self) -> None:
        if self.num_workers is not None and self.num_workers < 1:
            raise ValueError(f"--ray-workers must be >= 1, got {self.num_workers}")


class ReplayWorker:
    """The body of one Ray actor: one engine, built once, replaying one entry per call."""

    def __init__(self, engine_factory: EngineFactory, engine_args: dict[str, Any]) -> None:
        self.engine = engine_factory(engine_args)

    def identity(self) -> tuple[str, str]:
        """(fingerprint, numerics id; "" when the engine has none)."""
        return str(self.engine.fingerprint), str(getattr(self.engine, "numerics_id", "") or "")

    def replay(self, logged: LoggedEntry) -> ReplayResult:
        return replay_entry(self.engine, logged)


IN_FLIGHT = 2  # entries queued per actor: the next one starts while the driver reads a result


class RayReplayPool:
    """`num_workers` ReplayWorker actors; `close()` kills them (and a cluster it started)."""

    def __init__(
        self, options: RayOptions, engine_factory: EngineFactory, engine_args: dict[str, Any]
    ) -> None:
        import ray

        self._ray = ray
        self._started = _init_ray(ray, options)
        try:
            n = options.num_workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
            actor = ray.remote(num_cpus=1)(ReplayWorker)
            self.actors: list[Any] = [actor.remote(engine_factory, engine_args) for _ in range(n)]
            identities = ray.get([a.identity.remote() for a in self.actors])
        except Exception:
            self.close()
            raise
        numerics = {n for _, n in identities}
        if len(set(identities)) != 1 and (len(numerics) != 1 or "" in numerics):
            self.close()
            raise RayVerifyError(f"the Ray workers built different deployments: {identities}")
        self.fingerprint: str = identities[0][0]  # the refusal check's local fingerprint
        self.numerics_id: str = identities[0][1]

    def replay_in_order(self, entries: Sequence[LoggedEntry]) -> Iterator[ReplayResult]:
        """Replay every entry on the pool; yield the results in `entries` order. Each actor
        holds IN_FLIGHT entries (it runs them in turn), so it never waits on the driver."""
        ray = self._ray
        pending: dict[Any, tuple[int, Any]] = {}  # object ref -> (entry index, actor)
        done: dict[int, ReplayResult] = {}
        free = [a for _ in range(IN_FLIGHT) for a in self.actors]
        todo, emitted, dead = iter(range(len(entries))), 0, set()
        while emitted < len(entries):
            while free and (i := next(todo, None)) is not None:
                actor = free.pop()
                pending[actor.replay.remote(entries[i])] = (i, actor)
            if not pending:  # every actor died: fail what is left
                for i in range(emitted, len(entries)):
                    done.setdefault(i, _lost(entries[i], "no Ray replay worker left"))
            else:
                [ref], _ = ray.wait(list(pending), num_returns=1)
                i, actor = pending.pop(ref)
                try:
                    done[i] = ray.get(ref)
                    if id(actor) not in dead:
                        free.append(actor)
                except Exception as exc:  # the actor died: this entry fails, it leaves the pool
                    done[i] = _lost(entries[i], f"replay worker failed: {type(exc).__name__}")
                    dead.add(id(actor))
                    free = [a for a in free if id(a) not in dead]
            while emitted in done:
                yield done.pop(emitted)
                emitted += 1

    def close(self) -> None:
        for actor in getattr(self, "actors", ()):
            self._ray.kill(actor)
        self.actors = []
        if self._started:
            self._ray.shutdown()
            self._started = False


def _init_ray(ray: Any, options: RayOptions) -> bool:
    """Connect to (or, for "auto", start) the cluster; True when this call started one."""
    if ray.is_initialized():
        return False
    common = {"log_to_driver": False, "include_dashboard": False}
    if options.address == LOCAL:
        cpus = options.num_workers or os.cpu_count() or 1
        ray.init(num_cpus=cpus, runtime_env={"env_vars": _pythonpath()}, **common)
    else:
        address = "auto" if options.address == CLUSTER else options.address
        ray.init(address=address, **common)
    return True


def _pythonpath() -> dict[str, str]:
    """The local workers import the samebits this driver runs (a worktree's, not an install's)."""
    import samebits

    src = str(Path(samebits.__file__).resolve().parents[1])
    paths = [src, *[p for p in sys.path if p and Path(p).is_dir()]]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(paths))}


def _lost(logged: LoggedEntry, message: str) -> ReplayResult:
    n = len(logged.entry.get("output_token_ids") or ())
    return ReplayResult(int(logged.entry.get("seq", -1)), logged.where, False, message, n)
