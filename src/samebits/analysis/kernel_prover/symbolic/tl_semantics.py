"""The ``tl.*`` semantics: one handler per modelled Triton builtin, and the ``TL`` table.

Concern: what ``tl.program_id``, ``tl.arange``, ``tl.zeros``/``tl.full``, ``tl.load`` (and a
descriptor's ``desc.load``), ``tl.store``, ``tl.dot``, ``tl.where``, the min/max, the
reductions, the unary/binary math and ``tl.trans`` evaluate to, on symbolic tiles. Each
handler is ``f(p, e, args, kw)``: ``p`` the interpreter's program (used through its methods
only; this module does not import the interpreter), ``e`` the call's ``ast`` node.
Invariants: ``tl.dot`` follows the explicit hardware model of ``DOT_ATOM``; ``tl.sum`` /
``tl.max`` of floats is a function of its layout (shape, axis, warps) unless a goal's rule
says otherwise; a builtin not in ``TL`` is rejected by the interpreter.
"""

from __future__ import annotations

import ast
import hashlib

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.symbolic import words as W
from samebits.analysis.kernel_prover.symbolic.memory import Load, Store
from samebits.analysis.kernel_prover.symbolic.values import FLOAT_RANK, DType, Tile, Unsupported
from samebits.analysis.kernel_prover.terms import Lin, Term

DOT_ATOM = 16  # tl.dot hardware model: a left-to-right chain over k-atoms of 16
UNARY_FLOAT = {
    "sqrt_rn": "sqrt_rn", "exp2": "exp2", "exp": "exp", "log": "log", "log2": "log2",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos", "abs": "abs",
}  # fmt: skip
BINARY_FLOAT = {"div_rn": "div_rn"}


def _tl_program_id(p, e, args, kw):
    ax = args[0] if args else kw.get("axis")
    if not isinstance(ax, int) or not 0 <= ax < len(p.grid):
        raise Unsupported(p.where(e), "program_id axis must be a constant within the grid")
    if p.pids[ax] is None:
        if p.pid_vars[ax] is not None:
            p.pids[ax] = p.pid_vars[ax]
        else:
            n = p.grid[ax].const
            k = p.choose([True] * n, e) if n > 1 else 0
            p.pids[ax] = T.const(k)
    return Tile("int", (), p.pids[ax], "i32")


def _tl_num_programs(p, e, args, kw):
    """The grid's size along ``axis`` (a constant, or the launch's symbolic size)."""
    ax = args[0] if args else kw.get("axis")
    if not isinstance(ax, int) or not 0 <= ax < len(p.grid):
        raise Unsupported(p.where(e), "num_programs axis must be a constant within the grid")
    return Tile("int", (), p.grid[ax], "i32")


def _tl_arange(p, e, args, kw):
    lo, hi = (list(args) + [kw.get("start"), kw.get("end")])[:2]
    if not (isinstance(lo, int) and isinstance(hi, int)):
        raise Unsupported(p.where(e), "tl.arange bounds must be constexpr")
    n = hi - lo
    if n == 1:
        return Tile("int", ((1, None),), T.const(lo), "i32")
    lane = p.ex.fresh("lane", 0, n)
    key = lane.terms[0][0]
    p.lanes[key] = n
    return Tile("int", ((n, key),), lane.add(T.const(lo)), "i32")


def _shape(p, e, s):
    if isinstance(s, int):
        s = (s,)
    if not isinstance(s, tuple) or not all(isinstance(x, int) for x in s):
        raise Unsupported(p.where(e), "shape must be a tuple of constexpr ints")
    return s


def _filled(p, e, shape, value, dtype):
    if isinstance(dtype, tuple) and dtype and dtype[0] == "dtype-of":
        dtype = DType(dtype[1].dtype)
    if not isinstance(dtype, DType):
        raise Unsupported(p.where(e), "dtype must be a tl dtype")
    dims = []
    for n in _shape(p, e, shape):
        if n == 1:
            dims.append((1, None))
        else:
            lane = p.ex.fresh("lane", 0, n)
            dims.append((n, lane.terms[0][0]))
    dt = dtype.name
    if dt in FLOAT_RANK:
        if isinstance(value, Tile) and value.kind == "int" and not value.dims:
            # a symbolic shape constexpr (a row width): the float of that integer, one term
            # shared by both executions (the same shape symbol)
            v = value.v
            fill = T.fconst(v.const, dt) if v.is_const() else T.Term("itof", (v,), dt)
            return Tile("float", tuple(dims), fill, dt)
        if not isinstance(value, int | float):
            raise Unsupported(p.where(e), "tl.full value must be a constant")
        return Tile("float", tuple(dims), T.fconst(value, dt), dt)
    return Tile("int", tuple(dims), T.const(int(value)), dt)


def _tl_zeros(p, e, args, kw):
    shape = args[0] if args else kw["shape"]
    dtype = args[1] if len(args) > 1 else kw["dtype"]
    return _filled(p, e, shape, 0.0 if dtype.name in FLOAT_RANK else 0, dtype)


def _tl_full(p, e, args, kw):
    shape = args[0] if args else kw["shape"]
    value = args[1] if len(args) > 1 else kw["value"]
    dtype = args[2] if len(args) > 2 else kw["dtype"]
    return _filled(p, e, shape, value, dtype)


def _tl_load(p, e, args, kw):
    ptr = args[0] if args else kw["pointer"]
    mask = kw.get("mask", args[1] if len(args) > 1 else None)
    other = kw.get("other", args[2] if len(args) > 2 else None)
    extra = set(kw) - {"pointer", "mask", "other"}
    if extra:
        raise Unsupported(p.where(e), f"tl.load keyword(s) {sorted(extra)} not supported")
    if not (isinstance(ptr, Tile) and ptr.kind == "ptr"):
        raise Unsupported(p.where(e), "tl.load of a non-pointer")
    parts = [ptr]
    if mask is not None:
        parts.append(p.lift(mask))
    like = Tile("float", (), None, ptr.dtype) if ptr.dtype in FLOAT_RANK else None
    if other is not None:
        parts.append(p.lift(other, like))
        if parts[-1].kind in (W.WORD, W.PRED):
            raise Unsupported(p.where(e), "tl.load other= a data-dependent value: not modelled")
    dims, vals = p.broadcast(parts, e)
    array, idx = vals[0]
    m = vals[1] if mask is not None else True
    if mask is not None and parts[1].kind != "bool":
        raise Unsupported(p.where(e), "mask must be boolean")
    dt = ptr.dtype
    p.ex.loads.append(
        Load(p.ci, array, idx, m, tuple(p.path), tuple(p.pids_or_zero()), next(p.seq), p.where(e))
    )
    value = p.read(array, idx, m, dt, e)
    if dt in FLOAT_RANK:
        o = p.as_float(parts[-1], vals[-1], dt) if other is not None else T.fconst(0.0, dt)
        if other is None and m is not True:
            o = T.Term("undef", (array, next(p.ex._n)), dt)
        return Tile("float", dims, T.ite(m, value, o), dt)
    o = vals[-1] if other is not None else T.ZERO
    return Tile("int", dims, T.ite_int(m, value, o), dt)


def desc_load(p, e, desc: Tile, args) -> Tile:
    """``desc.load([r, c])``: the [block] box at (r, c) of the descriptor's array, +0.0 where a
    row >= rows or a column >= cols (TMA zero fill; offsets are non-negative here)."""
    if len(args) != 1 or not isinstance(args[0], tuple) or len(args[0]) != 2:
        raise Unsupported(p.where(e), "descriptor load takes one [row, col] offset list")
    array, rows, cols, block = desc.v
    dims, coords = [], []
    for off, n in zip(args[0], block, strict=True):
        lane = p.ex.fresh("lane", 0, n)
        key = lane.terms[0][0]
        p.lanes[key] = n
        dims.append((n, key))
        base = off.v if isinstance(off, Tile) else T.const(off)
        if isinstance(off, Tile) and (off.kind != "int" or off.dims):
            raise Unsupported(p.where(e), "descriptor offsets must be integer scalars")
        coords.append(base.add(lane))
    row, col = coords
    cols = cols if isinstance(cols, Lin) else T.const(cols)  # a symbolic K (a K class)
    idx = T.mul(row, cols).add(col)
    mask = T.c_and(T.cmp("<", row, rows), T.cmp("<", col, cols))
    dt = desc.dtype
    p.ex.loads.append(
        Load(
            p.ci, array, idx, mask, tuple(p.path), tuple(p.pids_or_zero()), next(p.seq), p.where(e)
        )  # fmt: skip
    )
    value = p.read(array, idx, mask, dt, e)
    return Tile("float", tuple(dims), T.ite(mask, value, T.fconst(0.0, dt)), dt)


def _tl_store(p, e, args, kw):
    ptr = args[0] if args else kw["pointer"]
    val = args[1] if len(args) > 1 else kw["value"]
    mask = kw.get("mask", args[2] if len(args) > 2 else None)
    if set(kw) - {"pointer", "value", "mask"}:
        raise Unsupported(p.where(e), "tl.store keywords other than mask")
    if not (isinstance(ptr, Tile) and ptr.kind == "ptr"):
        raise Unsupported(p.where(e), "tl.store to a non-pointer")
    val = p.lift(val, Tile("float", (), None, ptr.dtype) if ptr.dtype in FLOAT_RANK else None)
    word_ok = val.kind == W.WORD and val.dtype == ptr.dtype and ptr.dtype not in FLOAT_RANK
    if val.kind in (W.WORD, W.PRED) and not word_ok:
        # a word of the pointer's own integer type is stored as its term (the router's ids)
        raise Unsupported(p.where(e), f"tl.store of a data-dependent {val.kind}: not modelled")
    if mask is not None and p.lift(mask).kind != "bool":
        raise Unsupported(p.where(e), "tl.store mask must be an index condition")
    parts = [ptr, val] + ([p.lift(mask)] if mask is not None else [])
    dims, vals = p.broadcast(parts, e)
    array, idx = vals[0]
    if ptr.dtype in FLOAT_RANK:
        v = p.as_float(val, vals[1], ptr.dtype)
        if val.kind == "float" and val.dtype != ptr.dtype:
            raise Unsupported(p.where(e), f"implicit cast {val.dtype} -> {ptr.dtype} in tl.store")
    else:
        v = vals[1]
    m = vals[2] if mask is not None else True
    lanes = tuple(d[1] for d in dims if d[1] is not None)
    pid_keys = tuple(x.terms[0][0] for x in p.pids if x is not None and not x.is_const())
    ranges = {}
    for ax, x in enumerate(p.pids):
        if x is not None and not x.is_const():
            ranges[x.terms[0][0]] = (T.ZERO, p.grid[ax])
    for d in dims:
        if d[1] is not None:
            ranges[d[1]] = (T.ZERO, T.const(d[0]))
    if isinstance(v, Term):
        stray = T.free_atoms(v) & set(p.all_lanes()) - set(lanes)
        if stray:
            raise Unsupported(p.where(e), "stored value depends on a lane outside the store tile")
    p.ex.stores.append(
        Store(
            p.ci,
            array,
            idx,
            v,
            m,
            tuple(p.path),
            pid_keys + lanes,
            ranges,
            tuple(p.pids_or_zero()),
            next(p.seq),
            p.where(e),
        )  # fmt: skip
    )


def _tl_dot(p, e, args, kw):
    a, b = args[0], args[1]
    acc = args[2] if len(args) > 2 else kw.get("acc")
    prec = kw.get("input_precision", "tf32" if a.dtype == "fp32" else None)
    if set(kw) - {"acc", "input_precision", "out_dtype"}:
        raise Unsupported(p.where(e), "tl.dot keywords")
    out_dt = kw["out_dtype"].name if "out_dtype" in kw else "fp32"
    if len(a.dims) != 2 or len(b.dims) != 2 or a.kind != "float" or b.kind != "float":
        raise Unsupported(p.where(e), "tl.dot of two 2-D float tiles")
    (m, (k, ka)), ((k2, kb), n) = (a.dims[0], a.dims[1]), (b.dims[0], b.dims[1])
    if k != k2 or k % DOT_ATOM or ka is None or kb is None:
        raise Unsupported(p.where(e), f"tl.dot K must match and be a multiple of {DOT_ATOM}")
    dims = (m, n)
    if acc is None:
        cur = T.fconst(0.0, out_dt)
    else:
        acc = p.lift(acc)
        dims, vals = p.broadcast([Tile("int", dims, T.ZERO, "i32"), acc], e)
        if acc.kind != "float":
            raise Unsupported(p.where(e), "tl.dot accumulator must be float")
        cur = T.cast(vals[1], out_dt)
    if DOT_LANES in p.ex.rules:
        return Tile("float", dims, _dot_lanes(p, a.v, b.v, ka, kb, k, cur, prec, out_dt), out_dt)
    av = [T.subst_term(a.v, {ka: T.const(q)}) for q in range(k)]
    bv = [T.subst_term(b.v, {kb: T.const(q)}) for q in range(k)]
    for g in range(0, k, DOT_ATOM):
        cur = T.Term(
            "dot16",
            (cur, tuple(av[g : g + DOT_ATOM]), tuple(bv[g : g + DOT_ATOM]), prec),
            out_dt,
        )
    return Tile("float", dims, cur, out_dt)


DOT_LANES = "dot-lanes"  # rule: tl.dot as one generic k lane (`dot_lane`), not K constant lanes
DOTK = "dotk"


def dot_lane(k: int, level: int, kind: str = "dot.k") -> Lin:
    """The lane bound by a generic tl.dot over K = ``k`` (or a generic ``kind`` reduction over
    k lanes); ``level``: how many such terms its operands already nest. The same in both
    executions, never a tile lane."""
    return Lin.var(z3.Int(f"{kind}{k}.{level}"))


def _bind(p, k: int, kind: str, *operands: Term) -> Lin:
    """A bound lane over ``k`` lanes free in none of ``operands``, its range a fact."""
    free: set = set()
    for t in operands:
        free |= T.free_atoms(t)
    level = 0
    while dot_lane(k, level, kind).terms[0][0] in free:
        level += 1
    bound = dot_lane(k, level, kind)
    key = bound.terms[0][0]
    if key not in p.ex.bound_lanes:
        p.ex.bound_lanes.add(key)
        p.ex.facts += [bound.z3() >= 0, bound.z3() < k]
    return bound


def _max_lanes(p, e, x: Tile, axis: int) -> Tile:
    """With "max-any-order" and "dot-lanes": the exact maximum over an axis of n lanes as
    ``reduce(max, any-order, n, LANES, body)``, ``body`` the element at a bound lane (one
    comparison for a generic lane: equal element sequences have equal maxima)."""
    dims, (size, lane) = p.reduce_axis(x, axis, e)
    if lane is None:
        raise Unsupported(p.where(e), "tl.max over a broadcast axis")
    bound = _bind(p, size, "max.lane", x.v)
    p.ex.layouts.add(("max", "any-order"))
    body = p.subst_val(x, {lane: bound})
    return Tile("float", dims, T.Term("reduce", ("max", "any-order", size, LANES, body), x.dtype),
                x.dtype)  # fmt: skip


def _dot_lanes(p, av: Term, bv: Term, ka: int, kb: int, k: int, cur: Term, prec, dt) -> Term:
    """Rule "dot-lanes" (the attention goals): ``tl.dot`` is the term
    ``dotk(acc, K, a(l), b(l), precision)``, ``a(l)`` / ``b(l)`` the operands' elements at the
    bound k lane ``l`` (``0 <= l < K``, a fact of the execution). Under the k-atom chain model
    the product is a function of ``acc`` and the K-element sequences, so two such terms with
    the same K are equal when their accumulators are and their elements are equal for every
    lane in range: compared once for a generic lane, not once per k. Both executions must
    contract the same K in one call (a dot split into two calls is another term: refused)."""
    bound = _bind(p, k, "dot.k", av, bv)
    a_l, b_l = T.subst_term(av, {ka: bound}), T.subst_term(bv, {kb: bound})
    return T.Term(DOTK, (cur, k, a_l, b_l, prec), dt)


def _tl_where(p, e, args, kw):
    c, a, b = args
    c = p.lift(c)
    like = a if isinstance(a, Tile) else b if isinstance(b, Tile) else None
    a, b = p.lift(a, like), p.lift(b, like)
    dims, (vc, va, vb) = p.broadcast([c, a, b], e)
    if W.involved(c, a, b):
        return W.select(dims, c, a, b, vc, va, vb, p.where(e), p.as_float)
    if c.kind != "bool":
        raise Unsupported(p.where(e), "tl.where condition must be boolean")
    if a.kind == "int" and b.kind == "int":
        return Tile(
            "int", dims, T.ite_int(vc, va, vb), "i64" if "i64" in (a.dtype, b.dtype) else "i32"
        )
    if "float" in (a.kind, b.kind):
        dts = [t.dtype for t in (a, b) if t.kind == "float"]
        dt = max(dts, key=lambda d: FLOAT_RANK[d])
        return Tile("float", dims, T.ite(vc, p.as_float(a, va, dt), p.as_float(b, vb, dt)), dt)
    raise Unsupported(p.where(e), "tl.where operands")


def _minmax(name):
    def f(p, e, args, kw):
        if kw or len(args) != 2:
            # propagate_nan would change the operation: not modelled, so not accepted
            raise Unsupported(p.where(e), f"tl.{name}imum takes two operands, no keywords")
        a, b = args[0], args[1]
        like = a if isinstance(a, Tile) else b
        a, b = p.lift(a, like), p.lift(b, like)
        dims, (va, vb) = p.broadcast([a, b], e)
        if W.involved(a, b) and "float" not in (a.kind, b.kind):
            return W.minmax(name, dims, a, b, va, vb, p.where(e))
        if a.kind == "int" and b.kind == "int":
            fn = T.minimum if name == "min" else T.maximum
            return Tile("int", dims, fn(va, vb), "i64" if "i64" in (a.dtype, b.dtype) else "i32")
        dt = max([t.dtype for t in (a, b) if t.kind == "float"], key=lambda d: FLOAT_RANK[d])
        return Tile("float", dims, T.op(name, dt, p.as_float(a, va, dt), p.as_float(b, vb, dt)), dt)

    return f


def _reduce(name):
    def f(p, e, args, kw):
        x = args[0]
        axis = args[1] if len(args) > 1 else kw.get("axis")
        if set(kw) - {"axis"} or not isinstance(axis, int):
            raise Unsupported(p.where(e), f"tl.{name} needs a constant axis (no keep_dims)")
        if isinstance(x, Tile) and x.kind == "int" and name in ("max", "min"):
            return _int_reduce(p, e, name, x, axis)
        if not (isinstance(x, Tile) and x.kind == "float"):
            raise Unsupported(p.where(e), f"tl.{name} of a non-float tile")
        # the reduction tree follows the layout: shape, axis, warps are part of the symbol
        layout = (tuple(d[0] for d in x.dims), axis % len(x.dims), p.kcall.num_warps)
        generic = _lane_reduce(p, e, name, layout, x, axis)
        if generic is not None:
            return generic
        if name == "max" and "max-any-order" in p.ex.rules and DOT_LANES in p.ex.rules:
            return _max_lanes(p, e, x, axis)
        dims, vals = p.elems(x, axis, e)
        if name == "max" and "max-any-order" in p.ex.rules:
            # the exact maximum of the elements, whatever the reduction tree (assumption
            # `tl.max-exact`: no NaN; a -0.0/+0.0 tie only feeds exp2 of a difference)
            p.ex.layouts.add((name, "any-order"))
            return Tile("float", dims, T.Term("reduce", (name, "any-order", tuple(vals)), x.dtype),
                        x.dtype)  # fmt: skip
        if name == "sum" and "sum-of-zeros" in p.ex.rules:
            rest = [v for v in vals if not (v.op == "const" and v.args[0] == 0.0)]
            if len(rest) == 1 and _from_zero_dot(rest[0]):
                # x + (+0.0) == x exactly for x != -0.0, in any order: the one element left
                # is a dot chain started from +0.0 (never -0.0) (assumption `sum-of-zeros`)
                p.ex.layouts.add((name, "one-nonzero"))
                return Tile("float", dims, rest[0], x.dtype)
        p.ex.layouts.add((name, layout))
        return Tile("float", dims, T.Term("reduce", (name, layout, tuple(vals)), x.dtype), x.dtype)

    return f


LANES = "lanes"  # marks reduce(op, layout, LANES, body): the elements are body at lanes 0..n-1


def bound_lane(n: int) -> Lin:
    """The lane variable bound by the generic reductions over n lanes (one per width, the same
    in both executions; never a program id or a lane of a store)."""
    return Lin.var(z3.Int(f"reduce.lane{n}"))


def _lane_reduce(p, e, name: str, layout: tuple, x: Tile, axis: int) -> Tile | None:
    """Rule "lane-reduce" (the linear and row goals): a float reduction over a lane axis of n
    is the symbol ``reduce(op, layout, LANES, body)``, ``body`` the element at the bound lane
    ``reduce.lane<n>`` (``0 <= lane < n``, a fact of the execution). Two such reductions are
    equal when their layouts are and their bodies are equal for every lane in range, i.e. the
    element sequences are equal: the same model as the enumerated symbol, compared once for a
    generic lane instead of once per lane (a row of 4096 split-K sums). None (enumerate the
    elements) without the rule, for a broadcast axis, or when the elements already bind that
    lane (a nested reduction of the same width)."""
    dims, (size, lane) = p.reduce_axis(x, axis, e)
    if "lane-reduce" not in p.ex.rules or lane is None:
        return None
    bound = bound_lane(size)
    key = bound.terms[0][0]
    if key in T.free_atoms(x.v):
        return None
    if key not in p.ex.bound_lanes:
        p.ex.bound_lanes.add(key)
        p.ex.facts += [bound.z3() >= 0, bound.z3() < size]
    p.ex.layouts.add((name, layout))
    body = p.subst_val(x, {lane: bound})
    return Tile("float", dims, T.Term("reduce", (name, layout, LANES, body), x.dtype), x.dtype)


_IMUL = None


def opaque_mul(a: Lin, b: Lin) -> Lin:
    """``imul(a, b)``: a product of two runtime integers as an uninterpreted function, its
    operands in Z3's simplified form (so the term does not depend on how, or in what order,
    equal operands were built: ``shape.KV*2`` and ``2*shape.KV`` are one operand)."""
    global _IMUL
    if _IMUL is None:
        _IMUL = z3.Function("imul", z3.IntSort(), z3.IntSort(), z3.IntSort())
    return Lin.var(_IMUL(z3.simplify(a.z3()), z3.simplify(b.z3())))


def _from_zero_dot(t: Term) -> bool:
    """A tl.dot chain whose accumulator starts at the constant +0.0."""
    while t.op in ("dot16", DOTK):
        t = t.args[0]
    return T.is_pos_zero(t)


def _int_reduce(p, e, name: str, x: Tile, axis: int) -> Tile:
    """Integer tl.max / tl.min along an axis: exact (order-independent for integers). The result
    is a fresh integer bounded by the element at each of the execution's focus lanes (a sound
    subset of "the maximum of the elements": the other elements' bounds are not needed by the
    goals and only slow the solver down). With ``exact_int_reduce`` (the attention goals) also
    "the result is the element at some lane"."""
    if len(x.dims) != 1:
        raise Unsupported(p.where(e), f"integer tl.{name} of a 1-D tile only")
    dims = ()
    size, lane = x.dims[0]
    red = p.ex.fresh(f"{name}red")
    rz = red.z3()
    ge = (lambda v: rz >= v) if name == "max" else (lambda v: rz <= v)
    focus = p.ex.focus_lanes.get(size)
    if focus is not None and lane is not None:
        p.ex.facts.append(ge(T.subst_lin(x.v, {lane: focus}).z3()))
    if p.ex.exact_int_reduce and lane is not None:
        # the maximum (minimum) is one of the elements: at a lane `arg` of the tile (a fresh
        # witness in range); with the bound at the focus lanes it is exact where all live
        # lanes hold one value (a decode program's lanes are one token)
        arg = p.ex.fresh(f"arg{name}", 0, size)
        p.ex.facts.append(rz == T.subst_lin(x.v, {lane: arg}).z3())
    if p.ex.int_reduce_facts is not None:
        p.ex.facts += p.ex.int_reduce_facts(name, red, p)
    return Tile("int", dims, red, x.dtype)


def _unary(name):
    def f(p, e, args, kw):
        x = p.lift(args[0])
        if x.kind != "float":
            raise Unsupported(p.where(e), f"{name} of a non-float")
        return Tile("float", x.dims, T.op(name, x.dtype, x.v), x.dtype)

    return f


def _binary(name):
    def f(p, e, args, kw):
        like = args[0] if isinstance(args[0], Tile) else args[1]
        a, b = p.lift(args[0], like), p.lift(args[1], like)
        dims, (va, vb) = p.broadcast([a, b], e)
        dt = max([t.dtype for t in (a, b) if t.kind == "float"], key=lambda d: FLOAT_RANK[d])
        return Tile("float", dims, T.op(name, dt, p.as_float(a, va, dt), p.as_float(b, vb, dt)), dt)

    return f


def _tl_fma(p, e, args, kw):
    """``tl.fma(a, b, c)``: one rounding of a * b + c, an uninterpreted function of its three
    operands (never the same symbol as ``add(mul(a, b), c)``)."""
    if kw or len(args) != 3:
        raise Unsupported(p.where(e), "tl.fma takes three positional operands")
    like = next((a for a in args if isinstance(a, Tile)), None)
    tiles = [p.lift(a, like) for a in args]
    kinds = ("float", "int", W.WORD)
    if any(t.kind not in kinds for t in tiles) or all(t.kind != "float" for t in tiles):
        raise Unsupported(p.where(e), "tl.fma of non-float operands")
    dims, vals = p.broadcast(tiles, e)
    dt = max([t.dtype for t in tiles if t.kind == "float"], key=lambda d: FLOAT_RANK[d])
    ops = [p.as_float(t, v, dt) for t, v in zip(tiles, vals, strict=True)]
    return Tile("float", dims, T.op("fma", dt, *ops), dt)


def inline_asm(p, e, env):
    """``tl.inline_asm_elementwise(ASM, CONSTRAINTS, [x, ...], dtype=tl.float32, is_pure=True,
    pack=1)`` on float operands: an uninterpreted elementwise function named by the asm text
    (the same instruction on the same operands gives the same bits: a pure, elementwise asm
    is a function of its lane's operands; which function, the proof does not need)."""
    args, kw = e.args, {k.arg: k.value for k in e.keywords}
    fixed = (len(args) == 3 and all(isinstance(a, ast.Constant) and isinstance(a.value, str)
                                     for a in args[:2]) and isinstance(args[2], ast.List))  # fmt: skip
    pure = isinstance(kw.get("is_pure"), ast.Constant) and kw["is_pure"].value is True
    packed = isinstance(kw.get("pack"), ast.Constant) and kw["pack"].value == 1
    fp32 = "dtype" in kw and p.func_name(kw["dtype"]) == "tl.float32"
    if not (fixed and pure and packed and fp32 and set(kw) == {"dtype", "is_pure", "pack"}):
        raise Unsupported(p.where(e), "inline asm: only (asm, constraints, [float operands], "
                          "dtype=tl.float32, is_pure=True, pack=1)")  # fmt: skip
    ops = [p.lift(p.expr(a, env)) for a in args[2].elts]
    if not ops or any(t.kind != "float" for t in ops):
        raise Unsupported(p.where(e), "inline asm of non-float operands")
    dims, vals = p.broadcast(ops, e)
    name = "asm:" + hashlib.sha256(args[0].value.encode()).hexdigest()[:12]
    vals = [p.as_float(t, v, "fp32") for t, v in zip(ops, vals, strict=True)]
    return Tile("float", dims, T.op(name, "fp32", *vals), "fp32")


def _tl_trans(p, e, args, kw):
    x = args[0]
    if len(x.dims) != 2:
        raise Unsupported(p.where(e), "tl.trans of a 2-D tile only")
    return Tile(x.kind, (x.dims[1], x.dims[0]), x.v, x.dtype)


TL = {
    "tl.program_id": _tl_program_id,
    "tl.num_programs": _tl_num_programs,
    "tl.fma": _tl_fma,
    "tl.math.fma": _tl_fma,
    "tl.arange": _tl_arange,
    "tl.zeros": _tl_zeros,
    "tl.full": _tl_full,
    "tl.load": _tl_load,
    "tl.store": _tl_store,
    "tl.dot": _tl_dot,
    "tl.where": _tl_where,
    "tl.minimum": _minmax("min"),
    "tl.maximum": _minmax("max"),
    "tl.sum": _reduce("sum"),
    "tl.max": _reduce("max"),
    "tl.trans": _tl_trans,
}


def _register_router_ops() -> None:
    """The router kernel's constructs (`router_ops`): keep_dims, word min / max, tl.reduce
    with a combine function, tl.reshape, propagate_nan."""
    from samebits.analysis.kernel_prover.symbolic import router_ops as R

    for name in ("sum", "max", "min"):
        TL[f"tl.{name}"] = R.keep_dims_reduce(name, TL.get(f"tl.{name}", _reduce(name)))
    TL["tl.reduce"] = R.tl_reduce
    TL["tl.reshape"] = R.tl_reshape
    TL["tl.maximum"] = R.minmax_nan("max", TL["tl.maximum"])
    TL["tl.minimum"] = R.minmax_nan("min", TL["tl.minimum"])


for _n, _s in UNARY_FLOAT.items():
    TL[f"tl.{_n}"] = _unary(_s)
    TL[f"tl.math.{_n}"] = _unary(_s)
for _n, _s in BINARY_FLOAT.items():
    TL[f"tl.{_n}"] = _binary(_s)
    TL[f"tl.math.{_n}"] = _binary(_s)
_register_router_ops()
