"""The constructs of the MoE router kernel (`_moe_router_kernel.py`), modelled soundly.

Concern: ``tl.reshape`` (an exact row-major index remap, splitting axes only), reductions with
``keep_dims``, ``tl.reduce`` with a jit combine function, integer min / max over
data-dependent integers ("words"), and ``tl.maximum`` / ``tl.minimum`` with ``propagate_nan``.
Invariants: ``tl.reduce(x, axis, f)`` is the uninterpreted term
``reduce(("combine", f, digest of f's text), layout, LANES, body)``, the layout (shape, axis,
warps) part of the symbol as for ``tl.sum``: two such reductions are equal only for the same
combine function text, the same layout and equal element sequences. A word min / max is exact
(integer min / max of a multiset does not depend on the order): ``reduce(name, "exact-int",
LANES, body)``. ``maximum(a, b, propagate_nan=ALL)`` is its own operation (``max_nan``), never
the plain ``max``. A reshape that merges axes (a div / mod index remap) is rejected. A nested
reduction of the same width binds a lane of its own depth (``reduce.lane<n>.d<k>``, k above
every such lane free in its body), so no bound lane is captured.
"""

from __future__ import annotations

import ast
import hashlib

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.symbolic import words as W
from samebits.analysis.kernel_prover.symbolic.values import FLOAT_RANK, Tile, Unsupported
from samebits.analysis.kernel_prover.terms import Lin

PROPAGATE_NAN_ALL = ("tl.PropagateNan", "ALL")  # the value of ``tl.PropagateNan.ALL``
JIT_FN = "jit-fn"  # marker: ("jit-fn", name), a helper function passed as a value


def nested_lane(p, size: int, body_atoms: set) -> Lin:
    """The bound lane of a reduction over ``size`` lanes whose body holds ``body_atoms``: depth
    0 is `tl_semantics.bound_lane`'s; a deeper one where a shallower one is free in the body."""
    from samebits.analysis.kernel_prover.symbolic.tl_semantics import bound_lane

    depth, lane = 0, bound_lane(size)
    while lane.terms[0][0] in body_atoms:
        depth += 1
        lane = Lin.var(z3.Int(f"reduce.lane{size}.d{depth}"))
    key = lane.terms[0][0]
    if key not in p.ex.bound_lanes:
        p.ex.bound_lanes.add(key)
        p.ex.facts += [lane.z3() >= 0, lane.z3() < size]
    return lane


def _keep(dims: tuple, axis: int, rank: int, keep: bool) -> tuple:
    """The result dims with the reduced axis kept as a broadcast axis of 1 (``keep_dims``)."""
    if not keep:
        return dims
    a = axis % rank
    return (*dims[:a], (1, None), *dims[a:])


def _lane_body(p, e, x: Tile, axis: int):
    """(dims left, size, bound lane, body) of a reduction of ``x`` over a lane axis."""
    dims, (size, lane) = p.reduce_axis(x, axis, e)
    if lane is None:
        raise Unsupported(p.where(e), "reduction over a broadcast axis: not modelled here")
    bound = nested_lane(p, size, T.free_atoms(x.v))
    return dims, size, bound, p.subst_val(x, {lane: bound})


def combine_digest(fn: ast.FunctionDef) -> str:
    """A digest of a combine function's text (its AST): its identity in the reduction symbol."""
    return hashlib.sha256(ast.dump(fn).encode()).hexdigest()[:16]


def tl_reduce(p, e, args, kw):
    """``tl.reduce(x, axis, combine_fn, keep_dims=False)`` of a float tile."""
    if len(args) != 3 or set(kw) - {"keep_dims"}:
        raise Unsupported(p.where(e), "tl.reduce(x, axis, combine_fn[, keep_dims=])")
    x, axis, fn = args
    keep = kw.get("keep_dims", False)
    if not (isinstance(axis, int) and isinstance(keep, bool)):
        raise Unsupported(p.where(e), "tl.reduce axis and keep_dims must be constants")
    if not (isinstance(fn, tuple) and fn[:1] == (JIT_FN,)):
        raise Unsupported(p.where(e), "tl.reduce combine must be a jit function of the file")
    if not (isinstance(x, Tile) and x.kind == "float"):
        raise Unsupported(p.where(e), "tl.reduce of a non-float tile")
    comb = ("combine", fn[1], combine_digest(p.ex.src.functions[fn[1]]))
    layout = (tuple(d[0] for d in x.dims), axis % len(x.dims), p.kcall.num_warps)
    dims, _, _, body = _lane_body(p, e, x, axis)
    p.ex.layouts.add((comb, layout))
    out = T.Term("reduce", (comb, layout, "lanes", body), x.dtype)
    return Tile("float", _keep(dims, axis, len(x.dims), keep), out, x.dtype)


def keep_dims_reduce(name: str, plain):
    """``tl.sum`` / ``tl.max`` / ``tl.min`` with ``keep_dims``, and word min / max (exact);
    everything else is ``plain`` (the `tl_semantics` handler) unchanged."""

    def f(p, e, args, kw):
        keep = kw.get("keep_dims", False)
        rest = {k: v for k, v in kw.items() if k != "keep_dims"}
        if not isinstance(keep, bool):
            raise Unsupported(p.where(e), f"tl.{name} keep_dims must be a constant")
        x = args[0]
        axis = args[1] if len(args) > 1 else rest.get("axis")
        if isinstance(x, Tile) and x.kind == W.WORD and name in ("min", "max"):
            out = _word_reduce(p, e, name, x, axis)
        else:
            out = plain(p, e, args, rest)
        if keep and isinstance(x, Tile) and isinstance(axis, int):
            return Tile(out.kind, _keep(out.dims, axis, len(x.dims), True), out.v, out.dtype)
        return out

    return f


def _word_reduce(p, e, name: str, x: Tile, axis) -> Tile:
    """The exact min / max of a data-dependent integer tile along ``axis``."""
    if not isinstance(axis, int):
        raise Unsupported(p.where(e), f"tl.{name} needs a constant axis")
    dims, _, _, body = _lane_body(p, e, x, axis)
    out = T.Term("reduce", (name, "exact-int", "lanes", body), x.dtype)
    return Tile(W.WORD, dims, out, x.dtype)


def minmax_nan(name: str, plain):
    """``tl.minimum`` / ``tl.maximum``; with ``propagate_nan=tl.PropagateNan.ALL`` the float
    operation ``min_nan`` / ``max_nan`` (its own symbol); other keywords rejected."""

    def f(p, e, args, kw):
        if not kw:
            return plain(p, e, args, kw)
        if set(kw) != {"propagate_nan"} or kw["propagate_nan"] != PROPAGATE_NAN_ALL:
            raise Unsupported(p.where(e), f"tl.{name}imum: only propagate_nan=ALL is modelled")
        if len(args) != 2:
            raise Unsupported(p.where(e), f"tl.{name}imum takes two operands")
        like = args[0] if isinstance(args[0], Tile) else args[1]
        a, b = p.lift(args[0], like), p.lift(args[1], like)
        if "float" not in (a.kind, b.kind) or not {a.kind, b.kind} <= {"float", "int"}:
            raise Unsupported(p.where(e), f"tl.{name}imum propagate_nan of non-floats")
        dims, (va, vb) = p.broadcast([a, b], e)
        dt = max([t.dtype for t in (a, b) if t.kind == "float"], key=lambda d: FLOAT_RANK[d])
        v = T.op(f"{name}_nan", dt, p.as_float(a, va, dt), p.as_float(b, vb, dt))
        return Tile("float", dims, v, dt)

    return f


def tl_reshape(p, e, args, kw):
    """``tl.reshape(x, shape)``: row-major, each old axis split into consecutive new axes
    (old lane = sum of new lanes times their row-major strides, exact); merging rejected."""
    if len(args) != 2 or set(kw) - {"can_reorder"} or kw.get("can_reorder"):
        raise Unsupported(p.where(e), "tl.reshape(x, shape) without can_reorder")
    x, shape = args
    if isinstance(shape, int):
        shape = (shape,)
    if not (isinstance(x, Tile) and isinstance(shape, tuple)):
        raise Unsupported(p.where(e), "tl.reshape of a tile to a constant shape")
    if not all(isinstance(s, int) and s >= 1 for s in shape):
        raise Unsupported(p.where(e), "tl.reshape shape must be constexpr ints")
    new_dims, sub, j = [], {}, 0
    for size, lane in x.dims:
        group, prod = [], 1
        while prod < size and j < len(shape):
            group.append(shape[j])
            prod *= shape[j]
            j += 1
        if prod != size:
            raise Unsupported(p.where(e), "tl.reshape that merges axes: not modelled")
        old = T.ZERO
        stride = size
        for g in group:
            stride //= g
            if g == 1:
                new_dims.append((1, None))
                continue
            v = p.ex.fresh("lane", 0, g)
            key = v.terms[0][0]
            p.lanes[key] = g
            new_dims.append((g, key))
            old = old.add(v.scale(stride))
        if lane is not None:
            sub[lane] = old
    if any(s != 1 for s in shape[j:]):
        raise Unsupported(p.where(e), "tl.reshape shape does not match")
    new_dims += [(1, None)] * (len(shape) - j)
    if len(new_dims) != len(shape):
        raise Unsupported(p.where(e), "tl.reshape shape does not match")
    return Tile(x.kind, tuple(new_dims), p.subst_val(x, sub) if sub else x.v, x.dtype)
