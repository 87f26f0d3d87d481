"""An execution ('left' or 'right') of a launch: its kernel calls, run path by path.

Concern: the driver. Each kernel call's grid is sized (``CDiv`` grids as bounded fresh
integers), its program ids made symbolic (or enumerated for small axes), and its
``@triton.jit`` function run by the interpreter once per path (an odometer over the branch
points the paths record). Holds the execution's facts, stores, loads and the extension
points the attention goals set. Invariants: every feasible path of every call is run; after
a call, a load of an in-place array must not see another program's store (:class:`RaceError`).
"""

from __future__ import annotations

import itertools

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.symbolic.interpreter import Program
from samebits.analysis.kernel_prover.symbolic.memory import Load, RaceError, Store, _active
from samebits.analysis.kernel_prover.symbolic.source import KernelSource
from samebits.analysis.kernel_prover.symbolic.values import CDiv, Unsupported
from samebits.analysis.kernel_prover.terms import Lin

SMALL_GRID = 4  # grid axes of at most this many programs (the split axis) run per program id


class Execution:
    """One execution ('left' or 'right') of a launch: a sequence of kernel calls."""

    def __init__(self, name: str, source: KernelSource, calls: list, remap=None):
        self.name = name
        self.src = source
        self.calls = calls
        self.remap = remap  # (array, idx Lin, ambient facts) -> (array, idx Lin)
        self.facts: list = []
        self.stores: list[Store] = []
        self.loads: list[Load] = []
        self._n = itertools.count()
        self.paths = 0
        self.layouts: set = set()
        # extension points (the attention goals): a summarized loop with a data-dependent
        # trip count, reads of inputs through a relation between the executions, facts about
        # integer reductions, and the float-reduction models the goal states as assumptions
        self.loop_hook = None  # (program, ast.For, env, bounds) -> None (updates env)
        self.read_hook = None  # (program, array, idx, mask, dtype, ambient) -> value | None
        self.focus_lanes: dict = {}  # tile size -> Lin lane var: int-reduction instances
        self.int_reduce_facts = None  # (name, result Lin, program) -> extra facts
        self.exact_int_reduce = False  # integer max/min: also "equal to some element"
        self.call_hook = None  # (call index, KernelCall, pid vars) -> None, before a call runs
        # "lane-reduce" (the default: linear and row goals); the attention goals replace it
        # by "max-any-order", "sum-of-zeros" (rules that look at the elements one by one)
        self.rules: frozenset = frozenset({"lane-reduce", "dot-lanes"})
        self.bound_lanes: set = set()  # atom keys of the bound lanes with range facts
        # a product of two runtime integers as an uninterpreted function (sound for proving
        # equalities; keeps Z3 in linear arithmetic)
        self.opaque_mul = False
        # int32 obligations (goals with `Goal.int32` bounds): (where, value, facts) of every
        # int32 + - * whose result is not a constant; None: not recorded
        self.int32: list | None = None

    def fresh(self, kind: str, lo=None, hi=None) -> Lin:
        v = z3.Int(f"{self.name}.{kind}{next(self._n)}")
        x = Lin.var(v)
        if lo is not None:
            self.facts.append(v >= (lo.z3() if isinstance(lo, Lin) else lo))
        if hi is not None:
            self.facts.append(v < (hi.z3() if isinstance(hi, Lin) else hi))
        return x

    def grid_size(self, g) -> Lin:
        if isinstance(g, int):
            return T.const(g)
        if isinstance(g, Lin):
            return g
        if isinstance(g, CDiv):
            if g.num.is_const():
                return T.const(-(-g.num.const // g.den))
            v = self.fresh("grid")
            n = g.num.z3()
            self.facts += [v.z3() * g.den >= n, v.z3() * g.den < n + g.den]
            return v
        raise TypeError(g)

    def run(self) -> Execution:
        for ci, call in enumerate(self.calls):
            fn = self.src.functions.get(call.kernel)
            if fn is None:
                raise Unsupported(self.src.filename, f"no @triton.jit function {call.kernel!r}")
            grid = [self.grid_size(g) for g in call.grid]
            pid_vars = [
                None
                if (g.is_const() and g.const <= SMALL_GRID and ax not in call.symbolic_axes)
                else self.fresh("pid", 0, g)
                for ax, g in enumerate(grid)
            ]
            if self.call_hook is not None:
                self.call_hook(ci, call, pid_vars)
            decisions: list[int] = []
            while True:
                prog = Program(self, ci, call, grid, pid_vars, decisions)
                prog.execute(fn)
                self.paths += 1
                # odometer over the recorded branch points
                arity = prog.arity
                decisions = list(prog.taken)
                while decisions and decisions[-1] + 1 >= arity[len(decisions) - 1]:
                    decisions.pop()
                if not decisions:
                    break
                decisions[-1] += 1
            self._check_in_place(ci)
        return self

    def stores_of(self, array: str) -> list[Store]:
        return [s for s in self.stores if s.array == array]

    # in-place arrays: a load must not see another program's store
    def _check_in_place(self, ci: int) -> None:
        for ld in [x for x in self.loads if x.call == ci]:
            for st in [s for s in self.stores if s.call == ci and s.array == ld.array]:
                ren = {k: self.fresh("w") for k in st.wvars}
                sub = {k: v for k, v in ren.items()}
                f = [
                    *self.facts,
                    *[T.cond_z3(c) for c in ld.path],
                    T.cond_z3(ld.mask),
                    *_active(st, sub, ld.index),
                ]
                other = z3.Or(
                    [
                        a.z3() != T.subst_lin(b, sub).z3()
                        for a, b in zip(ld.pids, st.pids, strict=True)
                    ]
                    or [z3.BoolVal(False)]
                )
                s = z3.Solver()
                s.set("timeout", 20000)
                s.add(*f)
                s.push()
                s.add(other)
                if s.check() != z3.unsat:
                    raise RaceError(
                        f"{ld.where}: a load of {ld.array} may read an element that another "
                        f"program stores at {st.where} (in-place race)",
                        s.model() if s.check() == z3.sat else None,
                    )
                s.pop()
                if st.path == ld.path and st.seq < ld.seq:
                    s.add(z3.And([a.z3() == T.subst_lin(b, sub).z3() for a, b in zip(
                        ld.pids, st.pids, strict=True)]))  # fmt: skip
                    if s.check() != z3.unsat:
                        raise Unsupported(
                            ld.where, f"load of {ld.array} after a store to it in the same program"
                        )
