"""Exhaustive, bounded model checking of the engine core (scheduler + KV cache manager).

For each `CheckConfig` the checker explores, by depth-first search over the nondeterministic
choices (which request arrives when, which one is aborted, each step's token budget), every
execution of the real `Scheduler` driving the `SymbolicRunner`, and checks every transition
(see `samebits.analysis.world`). States are deduplicated by a canonical digest of the
scheduler, cache, backend and environment state; a transition back to a state on the current
DFS path is reported as a livelock. The explored state graph is therefore a DAG, and the
number of complete executions (root-to-terminal paths, "schedules") is counted on it.

Evidence class: exhaustive model checking within the stated bounds (docs/model_checker.md).

CLI: `python -m samebits.analysis.model_checker [--quick]` prints the counts per config.
"""

from __future__ import annotations

import argparse
import pickle
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field

from samebits.analysis.scenarios import DEFAULT_SUITE, QUICK_SUITE, CheckConfig
from samebits.analysis.world import Action, Coverage, Model, Violation, World


@dataclass(frozen=True)
class Counterexample:
    """The first violation found and the actions that lead to it from the initial state."""

    kind: str
    message: str
    trace: tuple[Action, ...]

    def __str__(self) -> str:
        steps = " ".join(f"{kind}({arg})" for kind, arg in self.trace)
        return f"[{self.kind}] {self.message}\n  trace: {steps}"


@dataclass
class CheckResult:
    """Counts of one exhaustive run. `num_schedules` counts complete executions."""

    config: CheckConfig
    num_states: int = 0
    num_transitions: int = 0
    num_schedules: int = 0
    max_depth: int = 0
    coverage: Coverage = field(default_factory=Coverage)
    counterexample: Counterexample | None = None

    def summary(self) -> str:
        status = "OK" if self.counterexample is None else f"VIOLATION {self.counterexample}"
        cov = self.coverage
        return (
            f"{self.config.name}: {self.num_states} states, {self.num_transitions} transitions, "
            f"{self.num_schedules} schedules, depth {self.max_depth}; preempting steps "
            f"{cov.preempting_steps}, prefix-hit admissions {cov.prefix_hit_admissions}, "
            f"aborts {cov.aborts_running}+{cov.aborts_waiting}w, finished stop/length "
            f"{cov.finished_stop}/{cov.finished_length}, max batch {cov.max_batch_size}"
            f"{self._ahead()}: {status}"
        )

    def _ahead(self) -> str:
        cov = self.coverage
        if not self.config.lookahead:
            return ""
        return f", steps ahead {cov.ahead_steps} (wasted rows {cov.wasted_rows})"


@dataclass
class _Frame:
    key: bytes
    snapshot: bytes
    actions: list[Action]
    via: Action | None
    next_action: int = 0
    paths: int = 0


def check(config: CheckConfig, structural_checks: bool = True) -> CheckResult:
    """Explore every execution of `config`; stop at the first violation. With
    `structural_checks=False` only behaviour is checked (see `Model`)."""
    return _DepthFirstSearch(Model(config, structural_checks)).run()


class _DepthFirstSearch:
    """Iterative DFS over fingerprinted states. `paths[key]` (set once a state is finished)
    is the number of complete executions from that state; `on_path` holds the current path."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.result = CheckResult(model.config, coverage=model.coverage)
        self.stack: list[_Frame] = []
        self.on_path: set[bytes] = set()
        self.paths: dict[bytes, int] = {}

    def run(self) -> CheckResult:
        root = self._frame(self.model.initial(), None, None)
        self._push(root)
        while self.stack and self.result.counterexample is None:
            frame = self.stack[-1]
            if frame.next_action == len(frame.actions):
                self._finish(frame)
            else:
                self._expand(frame)
        self.result.num_states = len(self.paths) + len(self.stack)
        self.result.num_schedules = self.paths.get(root.key, 0)
        return self.result

    def _push(self, frame: _Frame) -> None:
        self.stack.append(frame)
        self.on_path.add(frame.key)
        self.result.max_depth = max(self.result.max_depth, len(self.stack) - 1)

    def _finish(self, frame: _Frame) -> None:
        self.stack.pop()
        self.on_path.discard(frame.key)
        self.paths[frame.key] = frame.paths if frame.actions else 1
        if self.stack:
            self.stack[-1].paths += self.paths[frame.key]

    def _expand(self, frame: _Frame) -> None:
        """Apply the frame's next action to a fresh copy of its world."""
        action = frame.actions[frame.next_action]
        frame.next_action += 1
        self.result.num_transitions += 1
        try:
            world: World = pickle.loads(frame.snapshot)
            self.model.apply(world, action)
            key = self.model.key(world)
            if key in self.on_path:
                raise Violation("livelock", f"{action} returns to a state on the current path")
        except Violation as exc:
            trace = tuple(f.via for f in self.stack[1:] if f.via is not None) + (action,)
            self.result.counterexample = Counterexample(exc.kind, exc.message, trace)
            return
        if key in self.paths:
            frame.paths += self.paths[key]
        else:
            self._push(self._frame(world, action, key))

    def _frame(self, world: World, via: Action | None, key: bytes | None) -> _Frame:
        snapshot = pickle.dumps(world, protocol=pickle.HIGHEST_PROTOCOL)
        return _Frame(key or self.model.key(world), snapshot, self.model.actions(world), via)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="run the small smoke suite")
    args = parser.parse_args(argv)
    suite = QUICK_SUITE if args.quick else DEFAULT_SUITE
    totals = [0, 0, 0]
    failed = False
    for config in suite:
        print(config.describe(), flush=True)
        result = check(config)
        print("  " + result.summary(), flush=True)
        totals[0] += result.num_states
        totals[1] += result.num_transitions
        totals[2] += result.num_schedules
        failed = failed or result.counterexample is not None
    print(f"total: {totals[0]} states, {totals[1]} transitions, {totals[2]} schedules")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
