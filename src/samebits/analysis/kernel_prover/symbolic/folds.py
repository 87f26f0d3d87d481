"""Loops with a symbolic trip count summarized as *fold terms* (the linear's k loop).

A loop ``for x in range(start, stop, step)`` (step a positive constant, ``stop`` symbolic:
the k loop of a class whose K is a shape symbol) that carries float tiles is executed once
with a symbolic iteration index ``j`` (``x = start + j * step``) and every carried tile
replaced by a *hole*: the element's own state before iteration ``j``. The update ``P`` must
be elementwise in the state: every occurrence of the hole in ``P`` is at the element's own
lanes (checked; a body that reads the state of another lane, a reduction over the state, is
rejected). The loop's result is the term ``fold(P, init, hole, j, start, stop, step)``.

Two fold terms are equal (``prover._equal``) when (1) their iteration sets
``{j >= 0 : start + j * step < stop}`` are equal, (2) their initial states are equal and
(3) their updates are equal for a generic state (the hole, one uninterpreted value shared by
both) and a generic iteration ``j`` of that set (the right index renamed to the left's, the
iteration's facts in the context). By induction over ``j`` the two loops then end in the same
state. A state the body leaves unchanged (``P`` is the hole) is its initial value. The body
may not branch on a runtime value, store, or contain a summarized loop (no nesting).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.symbolic.oracle import decide_under
from samebits.analysis.kernel_prover.symbolic.values import Tile, Unsupported
from samebits.analysis.kernel_prover.terms import Lin, Term

FOLD, HOLE = "fold", "hole"
MAX_SEGMENTS = 16  # a count C * Q (C constant) is folded as C segments of Q iterations


def hole(dtype: str) -> Term:
    """The generic state of the compared element (lane-free: one value for every lane)."""
    return Term(HOLE, (0,), dtype)


def runs(j: Lin, start: Lin, stop: Lin, step: Lin):
    """The condition: iteration ``j`` of ``range(start, stop, step)`` runs."""
    return T.c_and(T.cmp(">=", j, T.ZERO), T.cmp("<", start.add(T.mul(j, step)), stop))


class FoldHook:
    """``Execution.loop_hook`` of the goals whose loops are summarized by fold terms."""

    def __init__(self, ex) -> None:
        self.ex = ex
        self.active = False
        self.count = 0

    def __call__(self, prog, s: ast.For, env: dict, bounds: list) -> None:
        where = prog.where(s)
        if self.active:
            raise Unsupported(where, "a summarized loop inside a summarized loop")
        start, stop, step = _bounds(bounds, where)
        count = _count(start, stop, step)
        parts = _content(count) if count is not None else 1
        if count is None or parts == 1:
            self._peeled(prog, s, env, start, stop, step, count, where)
            return
        seg = Lin(tuple((k, v // parts) for k, v in count.terms), count.const // parts)
        for i in range(parts):  # C segments of Q iterations: the same iterations in order
            lo = start.add(T.mul(seg.scale(i), step))
            hi = start.add(T.mul(seg.scale(i + 1), step))
            self._peeled(prog, s, env, lo, hi, step, seg, where)

    def _peeled(self, prog, s, env, start, stop, step, count, where) -> None:
        """The loop as a fold over all iterations but the last, then the last one executed
        (where its count is proved >= 1): a body that branches on the iteration's position
        in a range (the TMA kernel's ``i % STEPS == STEPS - 1``) then folds without forking.
        The same rule on both executions keeps their iterations paired."""
        if count is None or decide_under(prog.facts(), T.cmp(">=", count, T.const(1))) is not True:
            self._fold(prog, s, env, start, stop, step, where)
            return
        last = start.add(T.mul(count.add(T.const(-1)), step))
        self._fold(prog, s, env, start, last, step, where)
        env[s.target.id] = Tile("int", (), last, "i32")
        for st in s.body:
            prog.stmt(st, env)

    def _fold(self, prog, s, env, start, stop, step, where) -> None:
        assigned = _assigned(s.body)
        carried = [x for x in assigned if x in env]
        if not carried:
            raise Unsupported(where, "summarized loop carries no state")
        uid = self.count
        self.count += 1
        j = Lin.var(z3.Int(f"{self.ex.name}.fold{uid}.j"))
        body = dict(env)
        body[s.target.id] = Tile("int", (), start.add(T.mul(j, step)), "i32")
        holes = {x: self._hole(prog, env[x], x, uid, where) for x in carried}
        body.update(holes)
        self._run_body(prog, s, body, runs(j, start, stop, step), where)
        for x in carried:
            env[x] = _summary(env[x], body[x], uid, x, (j, start, stop, step), where)
        for x in [*assigned, s.target.id]:
            if x not in carried:
                env.pop(x, None)

    def _hole(self, prog, like, name: str, uid: int, where: str) -> Tile:
        if not (isinstance(like, Tile) and like.kind == "float"):
            raise Unsupported(where, f"summarized loop state {name!r} must be a float tile")
        dims, lanes = [], []
        for size, _ in like.dims:
            lane = prog.ex.fresh("lane", 0, size)
            dims.append((size, lane.terms[0][0]) if size > 1 else (1, None))
            lanes.append(lane if size > 1 else T.ZERO)
        v = Term(HOLE, (("at", uid, name), *lanes), like.dtype)
        return Tile("float", tuple(dims), v, like.dtype)

    def _run_body(self, prog, s: ast.For, body: dict, cond, where: str) -> None:
        path, taken, nstores = list(prog.path), len(prog.taken), len(prog.ex.stores)
        prog.path.append(cond)
        self.active = True
        try:
            for st in s.body:
                if isinstance(st, ast.Break | ast.Continue):
                    raise Unsupported(prog.where(st), "break/continue")
                prog.stmt(st, body)
        finally:
            self.active = False
            prog.path = path
        if any(a > 1 for a in prog.arity[taken:]):
            raise Unsupported(where, "summarized loop body branches on a runtime value")
        if len(prog.ex.stores) != nstores:
            raise Unsupported(where, "a summarized loop that carries state also stores")


def _count(start: Lin, stop: Lin, step: Lin) -> Lin | None:
    """The trip count ``(stop - start) / step`` where the division is exact term by term."""
    d, c = stop.add(start, -1), step.const
    if d.const % c or any(v % c for _, v in d.terms):
        return None
    return Lin(tuple((k, v // c) for k, v in d.terms), d.const // c)


def _content(x: Lin) -> int:
    """The gcd of a symbolic count's coefficients and constant (1: not a multiple)."""
    g = math.gcd(x.const, *(v for _, v in x.terms))
    return g if 2 <= g <= MAX_SEGMENTS and not x.is_const() else 1


def _bounds(bounds: list, where: str) -> tuple[Lin, Lin, Lin]:
    vals = []
    for b in bounds:
        if isinstance(b, bool) or not isinstance(b, int | Tile):
            raise Unsupported(where, "loop bound must be an integer")
        if isinstance(b, Tile) and (b.kind != "int" or b.dims):
            raise Unsupported(where, "loop bound must be an integer scalar")
        vals.append(T.const(b) if isinstance(b, int) else b.v)
    if len(vals) == 1:
        start, stop, step = T.ZERO, vals[0], T.const(1)
    elif len(vals) in (2, 3):
        start, stop = vals[0], vals[1]
        step = vals[2] if len(vals) == 3 else T.const(1)
    else:
        raise Unsupported(where, "range() with 1 to 3 arguments")
    if not step.is_const() or step.const <= 0:
        raise Unsupported(where, "summarized loop: the step must be a positive constant")
    return start, stop, step


def _summary(init, post, uid: int, name: str, loop: tuple, where: str) -> Tile:
    """The carried tile after the loop: its fold term at the post tile's lanes."""
    if not (isinstance(post, Tile) and post.kind == "float" and post.dtype == init.dtype):
        raise Unsupported(where, f"summarized loop state {name!r} changes kind or dtype")
    if [d[0] for d in post.dims] != [d[0] for d in init.dims]:
        raise Unsupported(where, f"summarized loop state {name!r} changes shape")
    own = tuple(Lin(((k, 1),), 0) if k is not None else T.ZERO for _, k in post.dims)
    generic = hole(post.dtype)
    memo: dict = {}
    for h in _holes(post.v, uid, name):
        if h.args[1:] != own:
            raise Unsupported(where, f"summarized loop state {name!r}: the update reads the "
                              "state of another lane (not elementwise)")  # fmt: skip
        memo[h.id] = generic
    start = _at_lanes(init, post)
    update = _replace(post.v, memo)
    if update is generic:
        return Tile("float", post.dims, start, post.dtype)  # the identity update
    if _holes(update, None, None):
        raise Unsupported(where, f"summarized loop state {name!r}: another state's hole")
    j, lo, hi, step = loop
    v = Term(FOLD, (update, start, generic, j, lo, hi, step), post.dtype)
    return Tile("float", post.dims, v, post.dtype)


def _at_lanes(init: Tile, post: Tile) -> Term:
    """``init``'s value at the post tile's lanes (its own lane atoms renamed)."""
    sub = {}
    for (_, k), (_, o) in zip(init.dims, post.dims, strict=True):
        if k is not None and o is not None and k != o:
            sub[k] = Lin(((o, 1),), 0)
        elif k is not None and o is None:
            raise Unsupported("fold", "initial state varies along an axis the update does not")
    return T.subst_term(init.v, sub) if sub else init.v


def _holes(t: Term, uid, name) -> list[Term]:
    """The hole terms inside ``t`` (of loop ``uid``'s state ``name``; None: any loop's)."""
    out, seen, stack = [], set(), [t]
    while stack:
        cur = stack.pop()
        if cur.id in seen:
            continue
        seen.add(cur.id)
        if (
            cur.op == HOLE
            and cur.args[0] != 0
            and (uid is None or cur.args[0] == ("at", uid, name))
        ):
            out.append(cur)
        stack.extend(T._children(cur))
    return out


def _replace(t: Term, memo: dict, leaf: Callable[[Term], Term | None] | None = None) -> Term:
    """``t`` with the terms whose ids are keys of ``memo`` replaced by its values, and each
    term for which ``leaf`` returns a term replaced by that term."""
    if not memo and leaf is None:
        return t
    stack = [t]
    while stack:
        cur = stack[-1]
        if cur.id in memo:
            stack.pop()
            continue
        new = None if leaf is None else leaf(cur)
        if new is not None:
            memo[cur.id] = new
            stack.pop()
            continue
        pending = [a for a in T._children(cur) if a.id not in memo]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        memo[cur.id] = T._rebuild(cur, {}, memo)
    return memo[t.id]


def _assigned(stmts) -> list[str]:
    out = []
    for node in stmts:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in out:
                out.append(n.id)
    return out


def rename(t: Term, j_from: Lin, j_to: Lin) -> Term:
    """``t`` with the iteration index ``j_from`` replaced by ``j_to``."""
    return T.subst_term(t, {j_from.terms[0][0]: j_to})
