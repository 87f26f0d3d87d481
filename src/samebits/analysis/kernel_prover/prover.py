"""Relational goals over two executions ('left', 'right') and their proof or counterexample.

Both executions are run symbolically for one generic output element ``(r, c)`` of each goal
output (a row-major ``[rows, width]`` array). The prover shows, for each execution, that the
element is written by exactly one (program, lane) (coverage by a constructive witness, no
second writer), and that the two written value terms are equal under the facts of both
executions and the element: reads equal when their arrays are equal and their index
arithmetic is provably equal, every other node by congruence (the only float fact assumed).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.solving import check
from samebits.analysis.kernel_prover.symbolic import folds
from samebits.analysis.kernel_prover.symbolic.execution import Execution
from samebits.analysis.kernel_prover.symbolic.memory import (
    SHAPE_PREFIX,
    RaceError,
    Store,
    _active,
    witness,
)
from samebits.analysis.kernel_prover.symbolic.oracle import Oracle
from samebits.analysis.kernel_prover.symbolic.source import KernelSource
from samebits.analysis.kernel_prover.symbolic.tl_semantics import DOTK
from samebits.analysis.kernel_prover.symbolic.values import Unsupported
from samebits.analysis.kernel_prover.terms import Lin, Term

BATCH = "batch_invariance"
LAUNCH = "launch_equivalence"


@dataclass
class Goal:
    """``kind``: BATCH (left: M rows, symbolic; right: the M = 1 launch on row r's inputs) or
    LAUNCH (left and right: two launches over the same inputs and the same M).
    ``outputs``: goal arrays {name: row width}; ``rows``: input arrays whose row r is the
    right execution's row 0 (BATCH only; every other array is shared)."""

    kind: str
    outputs: dict
    rows: dict = field(default_factory=dict)
    # scatter outputs {array: (slot array, row width)}: row r of the launch writes row
    # slot[r] of the array (a KV cache). Compared element (slot[r], c) against (slot[r], c);
    # the slot mapping is assumed injective over the rows of a launch (`slot-injective`).
    scatter: dict = field(default_factory=dict)
    # the right execution is a reference path whose helper kernels (torch copies as Triton
    # text, certified/reference.py) are added to the kernel file's functions
    reference: str = ""
    # symbolic shape integers {name: (lo, hi)}, inclusive bounds: a width in ``outputs`` /
    # ``rows`` (and a kernel argument) may name one; the proof holds for every value in range
    shape: dict = field(default_factory=dict)
    # int32 range obligations: every int32 + - * of both executions stays in [-2^31, 2^31)
    # when M (the launch's rows) is at most ``int32["M"]`` and the shape integers are in their
    # bounds; empty: not checked (the goals of fixed shapes, older records)
    int32: dict = field(default_factory=dict)
    # loops whose trip count is symbolic (a shape symbol: the k loop of a K class) are
    # summarized by fold terms (`symbolic.folds`, induction) instead of forked / unrolled
    fold: bool = False

    def to_dict(self) -> dict:
        out = {"kind": self.kind, "outputs": self.outputs, "rows": self.rows}
        if self.fold:  # absent for the goals whose loops are unrolled (older records)
            out["loops"] = "fold"
        if self.shape:  # absent for the goals of fixed shapes (older records)
            out["shape"] = {k: list(v) for k, v in self.shape.items()}
        if self.int32:
            out["int32"] = dict(self.int32)
        if self.scatter:  # absent for the goals without scatter outputs (older records)
            out["scatter"] = {k: list(v) for k, v in self.scatter.items()}
        if self.reference:
            from samebits.kernels.triton.certified import reference

            out["reference"] = {"name": self.reference, "source_sha256": reference.sha256()}
        return out


@dataclass
class Result:
    ok: bool
    goal: Goal
    wall_s: float
    stats: dict
    counterexample: dict | None = None
    unsupported: str | None = None

    @property
    def status(self) -> str:
        if self.unsupported:
            return "rejected-unsupported"
        return "proved" if self.ok else "refuted"

    def to_dict(self) -> dict:
        return {
            "status": self.status,
            "wall_s": round(self.wall_s, 3),
            "stats": self.stats,
            "counterexample": self.counterexample,
            "unsupported": self.unsupported,
        }


class Refuted(Exception):
    def __init__(self, cex: dict):
        super().__init__(cex.get("reason", "refuted"))
        self.cex = cex


def _model_dict(m, names: list) -> dict:
    out = {}
    for d in sorted(m.decls(), key=lambda d: d.name()):
        if d.arity() == 0 and any(d.name().startswith(n) for n in names):
            v = m[d]
            if z3.is_int_value(v):
                out[d.name()] = v.as_long()
    return out


def prove(
    src: KernelSource, goal: Goal, left_calls: list, right_calls: list, m_left: Lin
) -> Result:
    """Prove ``goal`` between the two launches (lists of :class:`KernelCall`)."""
    t0 = time.perf_counter()
    stats: dict = {}
    try:
        _prove(src, goal, left_calls, right_calls, m_left, stats)
    except Unsupported as u:
        return Result(False, goal, time.perf_counter() - t0, stats, unsupported=str(u))
    except Refuted as r:
        return Result(False, goal, time.perf_counter() - t0, stats, counterexample=r.cex)
    except RaceError as r:
        cex = {"reason": str(r)}
        if r.model is not None:
            cex["model"] = _model_dict(r.model, ["L.", "R.", "elem."])
        return Result(False, goal, time.perf_counter() - t0, stats, counterexample=cex)
    return Result(True, goal, time.perf_counter() - t0, stats)


def reference_source(name: str) -> KernelSource:
    """The reference kernels of path ``name`` (the text in
    `samebits.kernels.triton.certified.reference`) as a parsed :class:`KernelSource`."""
    from samebits.kernels.triton.certified import reference

    if name not in reference.NAMES:
        raise ValueError(f"no reference path {name!r}")
    return KernelSource.parse(reference.SOURCE, reference.FILENAME)


def shape_symbol(name: str) -> Lin:
    """The symbolic shape integer ``name`` (shared by both executions and the goal)."""
    return Lin.var(z3.Int(SHAPE_PREFIX + name))


def _width(w) -> Lin:
    """A goal width: a constant, or a sum (``+``) of terms ``c*NAME``, ``NAME`` (symbolic shape
    integers) and integer constants, e.g. ``"128*HEADS+2048"``."""
    if not isinstance(w, str):
        return T.const(w)
    out = T.ZERO
    for term in w.split("+"):
        coef, _, name = term.strip().rpartition("*")
        if name.isdigit() and not coef:
            out = out.add(T.const(int(name)))
        else:
            out = out.add(shape_symbol(name).scale(int(coef) if coef else 1))
    return out


def _shape_facts(goal: Goal) -> list:
    out = []
    for name, (lo, hi) in goal.shape.items():
        v = shape_symbol(name).z3()
        out += [v >= lo, v <= hi]
    return out


def _run(name, src, calls, goal, remap=None) -> Execution:
    ex = Execution(name, src, calls, remap=remap)
    ex.facts += _shape_facts(goal)
    if goal.fold:
        ex.loop_hook = folds.FoldHook(ex)
    if goal.int32:
        ex.int32 = []
    return ex.run()


INT32 = (-(1 << 31), (1 << 31) - 1)


def _check_int32(ex: Execution, goal: Goal, m: Lin, side: str) -> int:
    """Every recorded int32 + - * of ``ex`` stays in range for every M <= ``goal.int32["M"]``
    and every shape in its bounds; the number of distinct obligations checked."""
    bounds = [*_shape_facts(goal), m.z3() >= 1, m.z3() <= goal.int32["M"]]
    seen = set()
    for where, v, facts in ex.int32 or ():
        if (where, v) in seen:
            continue
        seen.add((where, v))
        s = z3.Solver()
        s.set("timeout", 60000)
        s.add(*facts, *bounds, z3.Or(v.z3() < INT32[0], v.z3() > INT32[1]))
        res = check(s)
        if res == z3.sat:
            raise Refuted({"reason": f"int32 overflow in the {side} execution at {where}: "
                           f"{v} can leave the int32 range",
                           "model": _model_dict(s.model(), ["L.", "R.", "shape."])})  # fmt: skip
        if res != z3.unsat:
            raise Unsupported(where, f"int32 range of {v}: solver {res}")
    return len(seen)


def _prove(src, goal, left_calls, right_calls, m_left, stats) -> None:
    r = z3.Int("elem.r")
    elem_r = Lin.var(r)

    remap = None
    if goal.kind == BATCH:

        def remap(array, idx, ambient, where):
            if array not in goal.rows:
                return array, idx
            w = _width(goal.rows[array])
            inside = T.c_and(T.cmp(">=", idx, T.ZERO), T.cmp("<", idx, w))
            s = z3.Solver()
            s.set("timeout", 20000)
            s.add(*ambient)
            s.push()
            s.add(z3.Not(T.cond_z3(inside)))
            if check(s) == z3.unsat:
                return array, T.mul(elem_r, w).add(idx)
            s.pop()
            s.add(T.cond_z3(inside))
            if check(s) == z3.unsat:
                # outside the one row the M = 1 launch was given: memory no left read can see
                return f"{array}@right-outside-row", idx
            raise Unsupported(where, f"cannot decide whether {array}[{idx}] stays in its row")

    if goal.reference:
        src = src.with_functions(reference_source(goal.reference))
    left = _run("L", src, left_calls, goal)
    right = _run("R", src, right_calls, goal, remap)
    stats["paths"] = [left.paths, right.paths]
    if goal.int32:
        m_right = m_left if goal.kind == LAUNCH else T.const(1)
        stats["int32_obligations"] = [_check_int32(left, goal, m_left, "left"),
                                      _check_int32(right, goal, m_right, "right")]  # fmt: skip
    stats["layout_reductions"] = sorted({repr(x) for x in left.layouts | right.layouts})
    base = [*left.facts, *right.facts, r >= 0, r < m_left.z3(), m_left.z3() >= 1]
    compared = 0
    outputs = [(out, width, None) for out, width in goal.outputs.items()]
    outputs += [(out, width, slot) for out, (slot, width) in goal.scatter.items()]
    for out, width, slot in outputs:
        c = z3.Int(f"elem.c.{out}")
        wl = _width(width)
        elem = [*base, c >= 0, c < wl.z3()]
        col = Lin.var(c)
        inj = logical = None
        if slot is None:
            t_left = T.mul(elem_r, wl).add(col)
            t_right = col if goal.kind == BATCH else t_left
        else:
            # element (slot[r], c): the right execution's slot read is row r's (BATCH: the
            # slot mapping is a row input), so both target the same physical element
            if goal.kind == BATCH and goal.rows.get(slot) != 1:
                raise Unsupported("goal", f"{out}: the slot mapping {slot} must be a row input")
            fn = z3.Function(f"mem.{slot}", z3.IntSort(), z3.IntSort())
            t_left = t_right = T.mul(Lin.var(fn(r)), wl).add(col)
            inj = _injectivity(slot, m_left)
            logical = (slot, width, T.mul(elem_r, wl).add(col))
            for ex, side in ((left, "left"), (right, "right")):
                _scatter_rows(ex, out, slot, width, base, m_left, side)
                _unique(ex, out, side, inj)
        for ex, target, side in ((left, t_left, "left"), (right, t_right, "right")):
            _coverage(ex, out, target, elem, side, logical)
            if slot is None:
                _unique(ex, out, side)
        for sl in _last_writes(left, out):
            for sr in _last_writes(right, out):
                facts = [*elem, *_active(sl, {}, t_left), *_active(sr, {}, t_right)]
                if inj is not None:
                    facts += inj([sl.offset, sr.offset, t_left])
                s = z3.Solver()
                s.add(*facts)
                if check(s) == z3.unsat:
                    continue
                compared += 1
                _compare(sl, sr, facts, out)
    goal_arrays = set(goal.outputs) | set(goal.scatter)
    for ex, side in ((left, "left"), (right, "right")):
        # every other (array, call): intermediates, and outputs rewritten by a later call
        for array in sorted({st.array for st in ex.stores}):
            calls = sorted({st.call for st in ex.stores_of(array)})
            for ci in calls[:-1] if array in goal_arrays else calls:
                _unique(ex, array, side, call=ci)
    if compared == 0:
        # coverage holds vacuously when the facts are inconsistent: refuse to certify that
        raise Unsupported("goal", "no pair of stores was compared (inconsistent facts?)")
    stats["compared_store_pairs"] = compared


def _final(ex: Execution, array: str) -> list[Store]:
    """The stores of ``array``, all of one kernel call (the attention goals)."""
    stores = ex.stores_of(array)
    calls = {s.call for s in stores}
    if len(calls) > 1:
        raise Unsupported(stores[-1].where, f"{array} is written by more than one kernel call")
    return stores


def _last_writes(ex: Execution, array: str, call: int | None = None) -> list[Store]:
    """The stores of ``array`` by its last writing call (or by ``call``): in stream order the
    last call that writes an element determines it (an in-place kernel after a copy, as in an
    op-by-op reference path), so coverage and uniqueness are proved for that call."""
    stores = ex.stores_of(array)
    if not stores:
        return []
    last = max(s.call for s in stores) if call is None else call
    return [s for s in stores if s.call == last]


def _coverage(ex: Execution, array: str, target: Lin, elem: list, side: str, logical=None) -> None:
    """The element ``target`` is written by some store of the final call. ``logical`` (scatter
    outputs: slot array, width, ``r * width + c``): the writer is found in row coordinates
    (the store's ``slot[e] * width`` read as ``e * width``), then checked physically."""
    stores = _last_writes(ex, array)
    if not stores:
        raise Refuted({"reason": f"{side} execution never writes {array}"})
    covers = []
    for st in stores:
        sub = witness(st, target) if logical is None else witness(
            _row_store(st, logical[0]), logical[2]
        )  # fmt: skip
        if sub is None:
            raise Unsupported(st.where, f"store offset of {array} is not a mixed-radix index")
        covers.append(z3.And(_active(st, sub, target)))
    s = z3.Solver()
    s.set("timeout", 60000)
    s.add(*elem)
    s.add(z3.Not(z3.Or(covers)))
    res = check(s)
    if res == z3.sat:
        raise Refuted(
            {
                "reason": f"the {side} execution does not write this element of {array}",
                "element": _model_dict(s.model(), ["elem.", "L.", "R."]),
            }
        )
    if res != z3.unsat:
        raise Unsupported(stores[0].where, f"coverage of {array}: solver {res}")


def _unique(ex: Execution, array: str, side: str, inj=None, call: int | None = None) -> None:
    """No element of ``array`` is written by two (program, lane)s of its final call (or of
    ``call``). ``inj``: the slot mapping's injectivity instances (scatter outputs)."""
    stores = _last_writes(ex, array, call)
    for i, a in enumerate(stores):
        for b in stores[i:]:
            ren = {k: ex.fresh("u") for k in b.wvars}
            s = z3.Solver()
            s.set("timeout", 60000)
            s.add(*ex.facts)
            s.add(*_active(a, {}, a.offset))
            s.add(*_active(b, ren, a.offset))
            if inj is not None:
                s.add(*inj([a.offset, T.subst_lin(b.offset, ren)]))
            if a is b:
                s.add(z3.Or([Lin(((k, 1),), 0).z3() != ren[k].z3() for k in a.wvars] or [False]))
            res = check(s)
            if res == z3.unknown:  # never taken as "unique" (non-linear offsets: a timeout)
                raise Unsupported(a.where, f"uniqueness of the writers of {array}: solver unknown")
            if res == z3.sat:
                raise Refuted(
                    {
                        "reason": f"two programs/lanes of the {side} execution write the same "
                        f"element of {array} ({a.where}, {b.where})",
                        "model": _model_dict(s.model(), ["L.", "R."]),
                    }
                )


# --- scatter outputs (a KV cache written at slot[row]) ------------------------------------


def _mem_apps(e) -> bool:
    """``e`` contains an integer read from memory (``mem.<array>(index)``)."""
    stack, seen = [e], set()
    while stack:
        x = stack.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_app(x) and x.decl().name().startswith("mem."):
            return True
        stack.extend(x.children())
    return False


def _mem_atoms(x: Lin) -> list:
    """The top-level integer reads of ``x``: (atom key, coefficient, array, index z3)."""
    out = []
    for k, c in x.terms:
        e = T.atom(k)
        if z3.is_app(e) and e.num_args() == 1 and e.decl().name().startswith("mem."):
            out.append((k, c, e.decl().name()[4:], e.arg(0)))
    return out


def _slot_split(st: Store, slot: str, width: int, side: str):
    """``st.offset`` as ``slot[e] * width + rest``: (atom key, e Lin, rest Lin)."""
    atoms = _mem_atoms(st.offset)
    keys = {a[0] for a in atoms}
    nested = [k for k, _ in st.offset.terms if k not in keys and _mem_apps(T.atom(k))]
    if len(atoms) != 1 or nested:
        raise Unsupported(st.where, f"store offset of {st.array} is not {slot}[row] * {width} + "
                          f"column: {st.offset}")  # fmt: skip
    k, coef, name, arg = atoms[0]
    if name != slot:
        raise Refuted(
            {
                "reason": f"the {side} execution stores {st.array} at a slot read from {name}, "
                f"not from its rows of {slot}",
                "store": st.where,
            }
        )
    if coef != width:
        raise Unsupported(st.where, f"store offset of {st.array}: {slot}[row] * {coef}, the "
                          f"cache row is {width} wide")  # fmt: skip
    return k, Lin.of_z3(arg), st.offset.add(Lin(((k, coef),), 0), -1)


def _row_store(st: Store, slot: str) -> Store:
    """The store in row coordinates: ``slot[e] * width + rest`` read as ``e * width + rest``
    (used to find the writer of an element constructively; every check is physical)."""
    atoms = [a for a in _mem_atoms(st.offset) if a[2] == slot]
    if len(atoms) != 1:
        return st
    k, coef, _, arg = atoms[0]
    off = st.offset.add(Lin(((k, coef),), 0), -1).add(Lin.of_z3(arg).scale(coef))
    return dataclasses.replace(st, offset=off)


def _scatter_rows(ex: Execution, array: str, slot: str, width: int, base: list, m: Lin,
                  side: str) -> None:  # fmt: skip
    """Every store to ``array`` writes inside the cache row of the slot of a row of the launch:
    its offset is ``slot[e] * width + rest`` with ``0 <= rest < width`` and ``0 <= e < M``
    (only there does the injectivity assumption hold) wherever the store is active. Every
    call's stores, not only the last writer's: a cache row outside the launch's slots holds
    other tokens' keys and values."""
    for st in ex.stores_of(array):
        _, e, rest = _slot_split(st, slot, width, side)
        s = z3.Solver()
        s.set("timeout", 60000)
        s.add(*ex.facts, *base, *_active(st, {}, st.offset))
        inside = [rest.z3() >= 0, rest.z3() < width, e.z3() >= 0, e.z3() < m.z3()]
        s.add(z3.Not(z3.And(inside)))
        res = check(s)
        if res == z3.sat:
            raise Refuted(
                {
                    "reason": f"the {side} execution may store {array} outside the cache row of "
                    f"the slot of a row of the launch ({st.where}: column {rest}, slot of row "
                    f"{e})",
                    "model": _model_dict(s.model(), ["L.", "R.", "elem."]),
                }
            )
        if res != z3.unsat:
            raise Unsupported(st.where, f"slot row of {array}: solver {res}")


def _injectivity(slot: str, m: Lin):
    """Instances of assumption `slot-injective` for the slot reads in some offsets: two rows
    of the launch (``0 <= a, b < M``) that differ have different slots."""
    mz = m.z3()

    def facts(lins: list) -> list:
        apps = {}
        for x in lins:
            for k, _, name, arg in _mem_atoms(x):
                if name == slot:
                    apps[k] = (T.atom(k), arg)
        vals = list(apps.values())
        out = []
        for i, (sa, a) in enumerate(vals):
            for sb, b in vals[i + 1 :]:
                rows = z3.And(a >= 0, a < mz, b >= 0, b < mz, a != b)
                out.append(z3.Implies(rows, sa != sb))
        return out

    return facts


class _Mismatch(Exception):
    def __init__(self, reason: str, extra=None, left=None, right=None):
        super().__init__(reason)
        self.reason, self.extra, self.left, self.right = reason, extra, left, right


class _Split(Exception):
    def __init__(self, cond):
        super().__init__("split")
        self.cond = cond


MAX_SPLITS = 6


def _compare(
    sl: Store, sr: Store, facts: list, out: str, depth: int = 0, rules: frozenset = frozenset()
) -> None:
    """Equal value terms under ``facts``; an undecided select splits the facts in two.
    ``rules`` (the attention goals): "ctx" compares the two branches of equal selects under
    their conditions; "zero-product" compares tl.dot k-atoms as products (see
    :func:`_products`)."""
    s = z3.Solver()
    s.add(*facts)
    if check(s) == z3.unsat:
        return
    oracle = Oracle(facts)
    parents: dict = {}
    try:
        if isinstance(sl.value, Term) and isinstance(sr.value, Term):
            _terms_equal(oracle, sl.value, sr.value, parents, rules)
        elif isinstance(sl.value, Lin) and isinstance(sr.value, Lin):
            if not oracle.valid(sl.value.z3() == sr.value.z3()):
                raise _Mismatch("integer values differ", sl.value.z3() != sr.value.z3())
        else:
            raise _Mismatch("value kinds differ")
    except _Split as sp:
        if depth >= MAX_SPLITS:
            raise Unsupported(sl.where, f"more than {MAX_SPLITS} nested case splits") from None
        c = T.cond_z3(sp.cond)
        _compare(sl, sr, [*facts, c], out, depth + 1, rules)
        _compare(sl, sr, [*facts, z3.Not(c)], out, depth + 1, rules)
    except _Mismatch as mm:
        s = z3.Solver()
        s.add(*facts)
        if mm.extra is not None:
            s.push()
            s.add(mm.extra)
            if check(s) != z3.sat:
                s.pop()
        model = _model_dict(s.model(), ["elem.", "L.", "R."]) if check(s) == z3.sat else {}
        path = []
        key = (mm.left.id, mm.right.id) if mm.left is not None else None
        while key in parents:
            key, label = parents[key]
            path.append(label)
        raise Refuted(
            {
                "reason": f"{out}: {mm.reason}",
                "output": out,
                "element_and_programs": model,
                "left": T.describe(mm.left) if mm.left is not None else None,
                "right": T.describe(mm.right) if mm.right is not None else None,
                "where_in_term": _summarize_path(path[::-1]),
                "left_store": sl.where,
                "right_store": sr.where,
            }
        ) from None


def _summarize_path(path: list) -> str:
    out, depth = [], 0
    for p in path:
        if p == "dot16.acc":
            depth += 1
            continue
        if depth:
            out.append(f"dot16.acc^{depth}")
            depth = 0
        out.append(p)
    if depth:
        out.append(f"dot16.acc^{depth}")
    return " > ".join(out)


def _valid(oracle: Oracle, f, ctx: tuple) -> bool:
    """``f`` holds under the oracle's facts and the select conditions ``ctx``."""
    if oracle.valid(f):
        return True
    if not ctx:
        return False
    key = ("ctx", f.get_id(), ctx)
    hit = oracle.cache.get(key)
    if hit is None:
        hit = (f, oracle.check_unsat([*[T.cond_z3(c) for c in ctx], z3.Not(f)]))
        oracle.cache[key] = hit
    return hit[1]


def _decide(oracle: Oracle, c, ctx: tuple):
    if c is True or c is False:
        return c
    f = T.cond_z3(c)
    if _valid(oracle, f, ctx):
        return True
    if _valid(oracle, z3.Not(f), ctx):
        return False
    return None


def _norm(oracle: Oracle, t: Term, ctx: tuple = ()) -> Term:
    while t.op == "ite":
        d = _decide(oracle, t.args[0], ctx) if ctx else oracle.decide(t.args[0])
        if d is None:
            break
        t = t.args[1] if d else t.args[2]
    return t


ZERO_OPS = ("add", "sub", "mul")  # +0.0 op +0.0 = +0.0 (IEEE 754, exact in every format)


def _zero(oracle: Oracle, t: Term, ctx: tuple = ()) -> bool:
    """``t`` is +0.0 under the facts: the constant, a decided select of it, a cast of it, or
    ``+0.0 + +0.0``, ``+0.0 - +0.0``, ``+0.0 * +0.0`` (exact: no rounding, and flushing
    denormals does not touch zeros). So the masked lanes of a row block (a split-K sum of +0.0
    partials, a residual add of +0.0) equal the +0.0 another kernel loads there."""
    t = _norm(oracle, t, ctx)
    if t.op == "const":
        return T.is_pos_zero(t)
    if t.op == "cast":
        return _zero(oracle, t.args[0], ctx)
    return t.op in ZERO_OPS and all(_zero(oracle, a, ctx) for a in t.args)


def _lin_equal(oracle: Oracle, a: Lin, b: Lin, ctx: tuple = ()) -> bool:
    d = a.add(b, -1)
    if d.is_const():
        return d.const == 0
    key = ("lin", d)
    hit = oracle.cache.get(key)
    if hit is None:
        hit = oracle.cache[key] = oracle.valid(d.z3() == 0)
    if not hit and ctx:
        return _valid(oracle, d.z3() == 0, ctx)
    return hit


# --- tl.dot k-atoms as products (rule "zero-product", attention goals) --------------------

ZERO_PRODUCT = T.Term("zero-product", (), "fp32")
_ELEMENTWISE = {"cast", "exp2", "exp", "sub", "add", "mul", "neg", "max", "min", "div", "fma"}
_LIFT: dict = {}
_PROD: dict = {}


def _lift(t: Term) -> Term:
    """``t`` with its selects hoisted through elementwise float operations:
    ``f(ite(c, a, b), x) = ite(c, f(a, x), f(b, x))`` (f is a function)."""
    hit = _LIFT.get(t.id)
    if hit is not None:
        return hit
    out = t
    if t.op == "ite":
        out = T.ite(t.args[0], _lift(t.args[1]), _lift(t.args[2]))
    elif t.op in _ELEMENTWISE:
        args = [(_lift(a) if isinstance(a, Term) else a) for a in t.args]
        for i, a in enumerate(args):
            if isinstance(a, Term) and a.op == "ite":
                then = Term(t.op, tuple(args[:i] + [a.args[1]] + args[i + 1 :]), t.dtype)
                other = Term(t.op, tuple(args[:i] + [a.args[2]] + args[i + 1 :]), t.dtype)
                out = T.ite(a.args[0], _lift(then), _lift(other))
                break
        else:
            out = Term(t.op, tuple(args), t.dtype)
    _LIFT[t.id] = out
    return out


def _is_zero(t: Term) -> bool:
    """+0.0 exactly: the constant, its cast, or exp2(-inf - m) for a finite m (assumptions
    `finite-scores`: m is the running maximum of a row that has a live key in the tile)."""
    while t.op == "cast":
        t = t.args[0]
    if t.op == "const":
        return T.is_pos_zero(t)
    if t.op == "exp2" and t.args[0].op == "sub":
        first = t.args[0].args[0]
        return first.op == "const" and first.args[0] == float("-inf")
    return False


def _product(a: Term, b: Term) -> Term:
    """One k-term of a dot atom. A product whose left operand is +0.0 is the canonical zero
    whatever its (finite) right operand (assumption `zero-product`)."""
    key = (a.id, b.id)
    hit = _PROD.get(key)
    if hit is None:
        la = _lift(a)
        if la.op == "ite":
            hit = T.ite(la.args[0], _product(la.args[1], b), _product(la.args[2], b))
        elif _is_zero(la):
            hit = ZERO_PRODUCT
        else:
            hit = Term("product", (la, b), "fp32")
        _PROD[key] = hit
    return hit


def _terms_equal(
    oracle: Oracle, a: Term, b: Term, parents: dict, rules: frozenset = frozenset()
) -> None:
    _equal(oracle, a, b, parents, rules, set(), (), {}, set())


def _equal(oracle, a, b, parents, rules, done: set, ctx0: tuple, first: dict, failed: set):
    """Iterative comparison; ``done`` holds (pair, ctx) already compared (optimistically: any
    failure aborts the whole comparison). With "ctx", a pair met again under another context
    is first compared without context in a nested attempt (its own ``done``), so a shared
    subterm (the running max under every key's select) is not re-compared per context."""
    use_ctx = "ctx" in rules
    products = "zero-product" in rules
    stack = [(a, b, ctx0)]
    while stack:
        x, y, ctx = stack.pop()
        raw = (x.id, y.id)
        x, y = _norm(oracle, x, ctx), _norm(oracle, y, ctx)
        key = (x.id, y.id)
        if key != raw and raw in parents and key not in parents:
            parents[key] = (raw, "ite(decided)")
        if x is y or (key, ()) in done or (key, ctx) in done:
            continue
        if use_ctx and ctx and x.op != "ite":
            seen = first.setdefault(key, ctx)
            if seen != ctx and key not in failed:
                sub: set = set()
                try:
                    _equal(oracle, x, y, parents, rules, sub, (), first, failed)
                except (_Mismatch, _Split):
                    failed.add(key)
                else:
                    done |= sub
                    done.add((key, ()))
                    continue
        done.add((key, ctx))
        if x.op == "ite" and y.op != "ite":
            raise _Split(x.args[0])
        if y.op == "ite" and x.op != "ite":
            raise _Split(y.args[0])
        if x.op != y.op or x.dtype != y.dtype:
            if x.dtype == y.dtype and _zero(oracle, x, ctx) and _zero(oracle, y, ctx):
                continue
            raise _Mismatch(
                f"different operations {x.op}:{x.dtype} vs {y.op}:{y.dtype}", None, x, y
            )
        if x.op == "read":
            if x.args[0] != y.args[0]:
                raise _Mismatch(f"reads of different arrays {x.args[0]} vs {y.args[0]}", None, x, y)
            if not _lin_equal(oracle, x.args[1], y.args[1], ctx):
                raise _Mismatch(
                    f"reads {x.args[0]} at different indices",
                    x.args[1].z3() != y.args[1].z3(),
                    x,
                    y,
                )
            continue
        if x.op == "ite":
            cx, cy = T.cond_z3(x.args[0]), T.cond_z3(y.args[0])
            if not _valid(oracle, cx == cy, ctx):
                raise _Split(x.args[0])
            for lab, i in (("ite.then", 1), ("ite.else", 2)):
                parents.setdefault((x.args[i].id, y.args[i].id), (key, lab))
                sub = ctx
                if use_ctx:
                    sub = (*ctx, x.args[0] if i == 1 else T.c_not(x.args[0]))
                stack.append((x.args[i], y.args[i], sub))
            continue
        if len(x.args) != len(y.args):
            raise _Mismatch(f"{x.op}: different arity", None, x, y)
        if x.op == folds.FOLD:
            stack += _fold_pairs(oracle, x, y, ctx, key, parents)
            continue
        if products and x.op == "dot16":
            if x.args[3] != y.args[3] or len(x.args[1]) != len(y.args[1]):
                raise _Mismatch("dot16: parameters differ", None, x, y)
            parents.setdefault((x.args[0].id, y.args[0].id), (key, "dot16.acc"))
            stack.append((x.args[0], y.args[0], ctx))
            for j in range(len(x.args[1])):
                px = _product(x.args[1][j], x.args[2][j])
                py = _product(y.args[1][j], y.args[2][j])
                parents.setdefault((px.id, py.id), (key, f"dot16.product[{j}]"))
                stack.append((px, py, ctx))
            continue
        if products and x.op == DOTK:
            if x.args[1] != y.args[1] or x.args[4] != y.args[4]:
                raise _Mismatch("dotk: parameters differ", None, x, y)
            px, py = _product(x.args[2], x.args[3]), _product(y.args[2], y.args[3])
            parents.setdefault((x.args[0].id, y.args[0].id), (key, "dot16.acc"))
            parents.setdefault((px.id, py.id), (key, "dotk.product[l]"))
            stack += [(x.args[0], y.args[0], ctx), (px, py, ctx)]
            continue
        for i, (p, q) in enumerate(zip(x.args, y.args, strict=True)):
            if isinstance(p, Term):
                lab = "dot16.acc" if x.op in ("dot16", DOTK) and i == 0 else f"{x.op}.arg{i}"
                parents.setdefault((p.id, q.id), (key, lab))
                stack.append((p, q, ctx))
            elif isinstance(p, tuple) and p and isinstance(p[0], Term):
                if len(p) != len(q):
                    raise _Mismatch(f"{x.op}: {len(p)} vs {len(q)} operands", None, x, y)
                side = {1: "a", 2: "b"}.get(i, f"arg{i}") if x.op == "dot16" else f"elem{i}"
                for j, (u, v) in enumerate(zip(p, q, strict=True)):
                    parents.setdefault((u.id, v.id), (key, f"{x.op}.{side}[{j}]"))
                    stack.append((u, v, ctx))
            elif isinstance(p, Lin):
                if not _lin_equal(oracle, p, q, ctx):
                    raise _Mismatch(f"{x.op}: integer operands differ", p.z3() != q.z3(), x, y)
            elif p != q:
                raise _Mismatch(f"{x.op}: parameters differ ({p!r} vs {q!r})", None, x, y)


def _fold_pairs(oracle, x: Term, y: Term, ctx: tuple, key, parents: dict) -> list:
    """The obligations of two fold terms (`symbolic.folds`): the same iterations (checked
    here), then equal initial states and equal updates of the generic state at a generic
    iteration (the right index renamed to the left's, the iteration's facts in the context)."""
    px, ix, hx, jx, *lx = x.args
    py, iy, hy, jy, *ly = y.args
    if hx is not hy:
        raise _Mismatch("fold: different states", None, x, y)
    rx, ry = folds.runs(jx, *lx), folds.runs(jx, *ly)
    if not _valid(oracle, T.cond_z3(rx) == T.cond_z3(ry), ctx):
        raise _Mismatch("fold: different iterations", T.cond_z3(rx) != T.cond_z3(ry), x, y)
    py = folds.rename(py, jy, jx)
    parents.setdefault((ix.id, iy.id), (key, "fold.init"))
    parents.setdefault((px.id, py.id), (key, "fold.step"))
    return [(ix, iy, ctx), (px, py, (*ctx, rx))]
