"""The interpreter: one path of one program of a kernel call, over the function's ``ast``.

Concern: statements (assignments, unrolled ``for`` loops, ``if``, early ``return``),
expressions (names, constants, operators, comparisons, subscripts, attributes, ``.to``),
tile shapes and broadcasting, calls (inlined ``@triton.jit`` helpers; ``tl.*`` builtins via
``tl_semantics.TL``). Execution evaluates ONE generic element: program ids are symbolic,
every ``tl.arange`` is a symbolic lane index, and a tile value is an expression of its lane
indices (nothing is materialized). Invariants: a branch or loop bound that depends on a
runtime value forks (one path per feasible case, recorded in ``taken``/``arity`` for the
driver's odometer; infeasible cases are dropped by the solver); anything outside the
supported subset raises :class:`Unsupported` with ``file:line``.
"""

from __future__ import annotations

import ast
import contextlib
import itertools

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.symbolic import words as W
from samebits.analysis.kernel_prover.symbolic.memory import SHAPE_PREFIX
from samebits.analysis.kernel_prover.symbolic.memory import read as _read
from samebits.analysis.kernel_prover.symbolic.oracle import decide_under
from samebits.analysis.kernel_prover.symbolic.tl_semantics import (
    TL,
    desc_load,
    inline_asm,
    opaque_mul,
)
from samebits.analysis.kernel_prover.symbolic.values import (
    DTYPES,
    FLOAT_RANK,
    ArrayArg,
    DescArg,
    DType,
    FloatArg,
    KernelCall,
    Tile,
    Unsupported,
)
from samebits.analysis.kernel_prover.terms import Lin

MAX_FORK_VALUES = 16
# int32 results that can leave the range (Execution.int32 records them as obligations)
INT32_CHECKED = (ast.Add, ast.Sub, ast.Mult)
LOOP_RANGES = ("range", "tl.range", "tl.static_range")
# tl.range's scheduling hints: software pipelining, unrolling, buffering and warp
# specialization of the loop; they schedule the iterations' loads and instructions, never
# the order of an iteration's arithmetic or of the iterations (the loop's semantics)
LOOP_HINTS = ("num_stages", "loop_unroll_factor", "disallow_acc_multi_buffer", "flatten",
              "warp_specialize")  # fmt: skip
NONDETERMINISTIC = {
    "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and",
    "atomic_or", "atomic_xor", "rand", "randn", "randint", "rand4x", "randint4x",
}  # fmt: skip


class _Return(Exception):
    def __init__(self, value):
        self.value = value


_PY_BINOPS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Div: lambda a, b: a / b, ast.BitXor: lambda a, b: a ^ b,
    ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b,
    ast.LShift: lambda a, b: a << b, ast.RShift: lambda a, b: a >> b,
}  # fmt: skip
_PY_CMP = {
    ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
}  # fmt: skip


class Program:
    """One path of one program of one kernel call. ``ex`` is the :class:`Execution` it runs
    in (``execution.py``, which imports this module: used through its attributes only)."""

    def __init__(self, ex, ci: int, call: KernelCall, grid, pid_vars, decisions):
        self.ex = ex
        self.ci = ci
        self.kcall = call
        self.grid = grid
        self.pid_vars = pid_vars
        self.decisions = decisions
        self.taken: list[int] = []
        self.arity: list[int] = []
        self.path: list = []
        self.pids: list = [None] * len(grid)
        self.lanes: dict = {}  # lane key -> size
        self.seq = itertools.count()
        self.file = ex.src.files.get(call.kernel, ex.src.filename)

    def where(self, node) -> str:
        return f"{self.file}:{getattr(node, 'lineno', '?')}"

    def facts(self) -> list:
        return [*self.ex.facts, *[T.cond_z3(c) for c in self.path]]

    def pids_or_zero(self):
        return [x if x is not None else T.ZERO for x in self.pids]

    def all_lanes(self):
        return list(self.lanes)

    # a read of array[idx] under a mask: resolved against the memory of the launch
    read = _read

    def choose(self, options: list, node) -> int:
        """Fork over mutually exclusive conditions; infeasible ones are dropped."""
        feasible = []
        for i, c in enumerate(options):
            if decide_under(self.facts(), c) is not False:
                feasible.append(i)
        if not feasible:
            raise Unsupported(self.where(node), "no feasible case (inconsistent path)")
        pos = len(self.taken)
        pick = self.decisions[pos] if pos < len(self.decisions) else 0
        self.taken.append(pick)
        self.arity.append(len(feasible))
        c = options[feasible[pick]]
        if c is not True:
            self.path.append(c)
        return feasible[pick]

    # --- driver ---------------------------------------------------------------------
    def execute(self, fn: ast.FunctionDef) -> None:
        env = {}
        params = [a.arg for a in fn.args.args]
        for p in params:
            if p not in self.kcall.args:
                raise Unsupported(self.where(fn), f"specialization gives no value for {p!r}")
            env[p] = self.arg_value(self.kcall.args[p])
        with contextlib.suppress(_Return):
            self.block(fn.body, env)

    def arg_value(self, v):
        if isinstance(v, ArrayArg):
            return Tile("ptr", (), (v.name, T.ZERO), v.dtype)
        if isinstance(v, FloatArg):
            return Tile("float", (), T.Term("arg", (v.name,), "fp32"), "fp32")
        if isinstance(v, DescArg):
            rows = v.rows if isinstance(v.rows, Lin) else T.const(v.rows)
            return Tile("desc", (), (v.name, rows, v.cols, v.block), v.dtype)
        if isinstance(v, Lin):
            return Tile("int", (), v, "i32")
        return v  # constexpr python value

    # --- statements -----------------------------------------------------------------
    def block(self, stmts, env) -> None:
        for s in stmts:
            self.stmt(s, env)

    def stmt(self, s, env) -> None:
        if isinstance(s, ast.Expr):
            if isinstance(s.value, ast.Constant) and isinstance(s.value.value, str):
                return  # docstring
            self.expr(s.value, env)
        elif isinstance(s, ast.Assign):
            val = self.expr(s.value, env)
            for t in s.targets:
                self.assign(t, val, env)
        elif isinstance(s, ast.AnnAssign) and s.value is not None:  # NAME: tl.constexpr = ...
            self.assign(s.target, self.expr(s.value, env), env)
        elif isinstance(s, ast.AugAssign):
            cur = self.expr(s.target, env)
            self.assign(s.target, self.binop(s.op, cur, self.expr(s.value, env), s), env)
        elif isinstance(s, ast.For):
            self.for_loop(s, env)
        elif isinstance(s, ast.If):
            c = self.expr(s.test, env)
            if isinstance(c, bool | int) and not isinstance(c, Tile):
                self.block(s.body if c else s.orelse, env)
                return
            if not (isinstance(c, Tile) and c.kind == "bool" and not c.dims):
                raise Unsupported(self.where(s), "if on a tile (use tl.where)")
            k = self.choose([c.v, T.c_not(c.v)], s)
            self.block(s.body if k == 0 else s.orelse, env)
        elif isinstance(s, ast.Return):
            raise _Return(None if s.value is None else self.expr(s.value, env))
        elif isinstance(s, ast.Pass):
            return
        else:
            raise Unsupported(self.where(s), f"statement {type(s).__name__} is not supported")

    def assign(self, t, val, env) -> None:
        if isinstance(t, ast.Name):
            env[t.id] = val
        elif isinstance(t, ast.Tuple) and isinstance(val, tuple) and len(val) == len(t.elts):
            for a, b in zip(t.elts, val, strict=True):
                self.assign(a, b, env)
        else:
            raise Unsupported(self.where(t), "assignment target not supported")

    def for_loop(self, s: ast.For, env) -> None:
        if s.orelse:
            raise Unsupported(self.where(s), "for/else")
        if not isinstance(s.target, ast.Name):
            raise Unsupported(self.where(s), "loop target must be a name")
        it = s.iter
        self.check_loop_range(s, env)
        bounds = [self.expr(a, env) for a in it.args]
        if self.ex.loop_hook is not None and any(
            isinstance(b, Tile) and not b.v.is_const() for b in bounds
        ):
            self.ex.loop_hook(self, s, env, bounds)
            return
        bounds = [self.int_or_fork(b, s) for b in bounds]
        for v in range(*bounds):
            env[s.target.id] = v
            for st in s.body:
                if isinstance(st, ast.Break | ast.Continue):
                    raise Unsupported(self.where(st), "break/continue")
                self.stmt(st, env)

    def check_loop_range(self, s: ast.For, env) -> None:
        """``s`` iterates ``range`` / ``tl.range`` / ``tl.static_range`` with only
        ``tl.range``'s scheduling hints as keywords, each a constexpr (they schedule the loop,
        they change none of its arithmetic)."""
        it = s.iter
        if not (isinstance(it, ast.Call) and self.func_name(it.func) in LOOP_RANGES):
            raise Unsupported(self.where(s), "only range / tl.range / tl.static_range loops")
        allowed = LOOP_HINTS if self.func_name(it.func) == "tl.range" else ()
        for k in it.keywords:
            if k.arg not in allowed:
                raise Unsupported(self.where(s), f"range keyword {k.arg!r}")
            v = self.expr(k.value, env)
            if isinstance(v, Tile) or not isinstance(v, bool | int | type(None)):
                raise Unsupported(self.where(s), f"tl.range hint {k.arg!r} must be constexpr")

    def int_or_fork(self, b, node) -> int:
        """A loop bound: a constant, or a runtime scalar that takes few values (forked)."""
        if isinstance(b, int) and not isinstance(b, bool):
            return b
        if isinstance(b, Tile) and b.kind == "int" and not b.dims:
            if b.v.is_const():
                return b.v.const
            values = []
            s = z3.Solver()
            s.set("timeout", 20000)
            s.add(*self.facts())
            x = b.v.z3()
            while len(values) <= MAX_FORK_VALUES and s.check() == z3.sat:
                val = s.model().eval(x, model_completion=True).as_long()
                values.append(val)
                s.add(x != val)
            if len(values) > MAX_FORK_VALUES:
                raise Unsupported(
                    self.where(node), f"loop bound {b.v} takes more than {MAX_FORK_VALUES} values"
                )
            k = self.choose([T.cmp("==", b.v, T.const(v)) for v in values], node)
            return values[k]
        raise Unsupported(self.where(node), "loop bound must be an integer")

    # --- expressions ----------------------------------------------------------------
    def func_name(self, node) -> str:
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            return f"{self.func_name(node.value)}.{node.attr}"
        raise Unsupported(self.where(node), "unsupported callee")

    def expr(self, e, env):
        if isinstance(e, ast.Constant):
            return e.value
        if isinstance(e, ast.Name):
            if e.id in env:
                return env[e.id]
            if e.id in self.ex.src.constants:
                return self.ex.src.constants[e.id]
            if e.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[e.id]
            if e.id in self.ex.src.functions:  # a jit helper as a value (tl.reduce's combine)
                return ("jit-fn", e.id)
            raise Unsupported(self.where(e), f"unknown name {e.id!r}")
        if isinstance(e, ast.Tuple | ast.List):
            return tuple(self.expr(x, env) for x in e.elts)
        if isinstance(e, ast.BinOp):
            return self.binop(e.op, self.expr(e.left, env), self.expr(e.right, env), e)
        if isinstance(e, ast.UnaryOp):
            return self.unary(e, self.expr(e.operand, env))
        if isinstance(e, ast.Compare):
            if len(e.ops) != 1:
                raise Unsupported(self.where(e), "chained comparison")
            return self.compare(
                e.ops[0], self.expr(e.left, env), self.expr(e.comparators[0], env), e
            )
        if isinstance(e, ast.BoolOp):
            vals = [self.expr(x, env) for x in e.values]
            if any(isinstance(v, Tile) for v in vals):
                raise Unsupported(self.where(e), "and/or on tensors (use & and |)")
            return all(vals) if isinstance(e.op, ast.And) else any(vals)
        if isinstance(e, ast.IfExp):
            c = self.expr(e.test, env)
            if isinstance(c, Tile):
                raise Unsupported(self.where(e), "conditional expression on a runtime value")
            return self.expr(e.body if c else e.orelse, env)
        if isinstance(e, ast.Subscript):
            return self.subscript(e, self.expr(e.value, env))
        if isinstance(e, ast.Attribute):
            return self.attribute(e, env)
        if isinstance(e, ast.Call):
            return self.call(e, env)
        raise Unsupported(self.where(e), f"expression {type(e).__name__} is not supported")

    def attribute(self, e: ast.Attribute, env):
        name = None
        with contextlib.suppress(Unsupported):
            name = self.func_name(e)
        if name and name.startswith("tl.") and name.split(".")[-1] in DTYPES:
            return DType(DTYPES[name.split(".")[-1]])
        if name == "tl.PropagateNan.ALL":
            return ("tl.PropagateNan", "ALL")
        if e.attr == "shape" and not (name or "").startswith("tl."):
            base = self.expr(e.value, env)
            if isinstance(base, Tile):
                return tuple(d[0] for d in base.dims)
        base = self.expr(e.value, env)
        if isinstance(base, Tile) and e.attr == "T" and len(base.dims) == 2:
            return Tile(base.kind, (base.dims[1], base.dims[0]), base.v, base.dtype)
        if isinstance(base, Tile) and e.attr == "dtype":
            return ("dtype-of", base)
        if isinstance(base, tuple) and base and base[0] == "dtype-of" and e.attr == "element_ty":
            if base[1].kind != "ptr":
                raise Unsupported(self.where(e), "element_ty of a non-pointer")
            return DType(base[1].dtype)
        raise Unsupported(self.where(e), f"attribute {e.attr!r} is not supported")

    def subscript(self, e: ast.Subscript, val):
        if not isinstance(val, Tile):
            raise Unsupported(self.where(e), "subscript of a non-tensor")
        idx = e.slice.elts if isinstance(e.slice, ast.Tuple) else [e.slice]
        dims, src = [], list(val.dims)
        for ix in idx:
            if isinstance(ix, ast.Constant) and ix.value is None:
                dims.append((1, None))
            elif (
                isinstance(ix, ast.Slice)
                and ix.lower is None
                and ix.upper is None
                and ix.step is None
            ):
                if not src:
                    raise Unsupported(self.where(e), "too many ':' in subscript")
                dims.append(src.pop(0))
            else:
                raise Unsupported(self.where(e), "only [:, None] / [None, :] subscripts")
        dims += src
        return Tile(val.kind, tuple(dims), val.v, val.dtype)

    # --- tiles ----------------------------------------------------------------------
    def lift(self, x, like: Tile | None = None) -> Tile:
        if isinstance(x, Tile):
            return x
        if isinstance(x, bool):
            return Tile("bool", (), x, "i1")
        if isinstance(x, int):
            return Tile("int", (), T.const(x), "i32")
        if isinstance(x, float):
            dt = like.dtype if like is not None and like.kind == "float" else "fp32"
            return Tile("float", (), T.fconst(x, dt), dt)
        raise TypeError(x)

    def broadcast(self, tiles: list[Tile], node) -> tuple[tuple, list]:
        rank = max(len(t.dims) for t in tiles)
        padded = [((1, None),) * (rank - len(t.dims)) + tuple(t.dims) for t in tiles]
        out = []
        for ax in range(rank):
            cur = (1, None)
            for p in padded:
                d = p[ax]
                if d[0] == 1:
                    continue
                if cur[0] == 1:
                    cur = d
                elif cur[0] != d[0]:
                    raise Unsupported(self.where(node), f"incompatible shapes {cur[0]} vs {d[0]}")
            out.append(cur)
        vals = []
        for t, p in zip(tiles, padded, strict=True):
            sub = {}
            for d, o in zip(p, out, strict=True):
                if d[1] is not None and d[1] != o[1]:
                    sub[d[1]] = Lin(((o[1], 1),), 0)
            vals.append(self.subst_val(t, sub) if sub else t.v)
        return tuple(out), vals

    def subst_val(self, t: Tile, sub: dict):
        if t.kind == "int":
            return T.subst_lin(t.v, sub)
        if t.kind == "bool":
            return T.subst_cond(t.v, sub)
        if t.kind in ("float", W.WORD, W.PRED):
            return T.subst_term(t.v, sub)
        if t.kind == "ptr":
            return (t.v[0], T.subst_lin(t.v[1], sub))
        raise TypeError(t.kind)

    def as_float(self, t: Tile, v, dtype: str):
        if t.kind == "float":
            return T.cast(v, dtype)
        if t.kind == "int":
            if v.is_const():
                return T.fconst(v.const, dtype)
            return T.Term("itof", (v,), dtype)
        if t.kind == W.WORD:
            return W.word_to_float(v, dtype)
        raise Unsupported("?", f"{t.kind} used as float")

    def binop(self, op, a, b, node):
        if not isinstance(a, Tile) and not isinstance(b, Tile):
            if isinstance(a, DType) or isinstance(b, DType):
                raise Unsupported(self.where(node), "arithmetic on a dtype")
            return _PY_BINOPS[type(op)](a, b)
        a, b = (
            self.lift(a, b if isinstance(b, Tile) else None),
            self.lift(b, a if isinstance(a, Tile) else None),
        )
        dims, (va, vb) = self.broadcast([a, b], node)
        kinds = {a.kind, b.kind}
        if "ptr" in kinds:
            if isinstance(op, ast.Add | ast.Sub) and a.kind == "ptr" and b.kind == "int":
                sign = 1 if isinstance(op, ast.Add) else -1
                return Tile("ptr", dims, (va[0], va[1].add(vb, sign)), a.dtype)
            if isinstance(op, ast.Add) and b.kind == "ptr" and a.kind == "int":
                return Tile("ptr", dims, (vb[0], vb[1].add(va)), b.dtype)
            raise Unsupported(self.where(node), "pointer arithmetic other than ptr +/- int")
        if W.involved(a, b) and "float" not in kinds:
            return W.binop(op, dims, a, b, va, vb, self.where(node))
        if W.PRED in kinds:
            raise Unsupported(self.where(node), "arithmetic on a data-dependent predicate")
        if kinds == {"bool"}:
            if isinstance(op, ast.BitAnd):
                return Tile("bool", dims, T.c_and(va, vb), "i1")
            if isinstance(op, ast.BitOr):
                return Tile("bool", dims, T.c_or(va, vb), "i1")
            raise Unsupported(self.where(node), "operator on booleans")
        if "bool" in kinds:
            # booleans in integer arithmetic (e.g. (M > 16) * 2): 0/1 integers
            va = T.ite_int(va, T.const(1), T.ZERO) if a.kind == "bool" else va
            vb = T.ite_int(vb, T.const(1), T.ZERO) if b.kind == "bool" else vb
            a = Tile("int", a.dims, va, "i32") if a.kind == "bool" else a
            b = Tile("int", b.dims, vb, "i32") if b.kind == "bool" else b
            kinds = {a.kind, b.kind}
        if kinds == {"int"}:
            dt = "i64" if "i64" in (a.dtype, b.dtype) else "i32"
            out = self._int_binop(op, dims, a, b, va, vb, dt, node)
            if dt == "i32" and self.ex.int32 is not None and isinstance(op, INT32_CHECKED):
                self.ex.int32.append((self.where(node), out.v, list(self.facts())))
            return out
        return self._float_binop(op, dims, a, b, va, vb, node)

    def _int_binop(self, op, dims, a, b, va, vb, dt, node):
        """Integer arithmetic (exact: linear normal forms; int32 range checked by the caller)."""
        if isinstance(op, ast.Add):
            return Tile("int", dims, va.add(vb), dt)
        if isinstance(op, ast.Sub):
            return Tile("int", dims, va.add(vb, -1), dt)
        if isinstance(op, ast.Mult):
            if self.ex.opaque_mul and not va.is_const() and not vb.is_const():
                return Tile("int", dims, opaque_mul(va, vb), dt)
            return Tile("int", dims, T.mul(va, vb), dt)
        if isinstance(op, ast.FloorDiv):
            return Tile("int", dims, self.nonneg_div(T.floordiv, va, vb, node), dt)
        if isinstance(op, ast.Mod):
            return Tile("int", dims, self.nonneg_div(T.mod, va, vb, node), dt)
        if isinstance(op, ast.BitXor):
            return Tile("int", dims, T.xor(va, vb), dt)
        if isinstance(op, ast.Div):
            fa, fb = self.as_float(a, va, "fp32"), self.as_float(b, vb, "fp32")
            return Tile("float", dims, T.op("div", "fp32", fa, fb), "fp32")
        raise Unsupported(self.where(node), f"integer operator {type(op).__name__}")

    def _float_binop(self, op, dims, a, b, va, vb, node):
        """Float arithmetic: promote, then an uninterpreted function of the operands."""
        dts = [t.dtype for t in (a, b) if t.kind == "float"]
        dt = max(dts, key=lambda d: FLOAT_RANK[d])
        fa, fb = self.as_float(a, va, dt), self.as_float(b, vb, dt)
        name = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}.get(type(op))
        if name is None:
            raise Unsupported(self.where(node), f"float operator {type(op).__name__}")
        return Tile("float", dims, T.op(name, dt, fa, fb), dt)

    def nonneg_div(self, fn, a: Lin, b: Lin, node) -> Lin:
        """Integer // and % on values proved non-negative (C and Python semantics agree)."""
        if not (b.is_const() and b.const > 0):
            q, r = self.symbolic_divmod(a, b, node)
            return q if fn is T.floordiv else r
        exact = _shape_quotient(a, b.const)
        if exact is not None:  # constexpr arithmetic of a class's shape symbols
            return exact if fn is T.floordiv else T.ZERO
        if not a.is_const() and decide_under(self.facts(), T.cmp(">=", a, T.ZERO)) is not True:
            raise Unsupported(self.where(node), f"integer // or % of a possibly negative {a}")
        return fn(a, b)

    def symbolic_divmod(self, a: Lin, b: Lin, node) -> tuple[Lin, Lin]:
        """``(a // b, a % b)`` for a divisor ``b`` with one symbolic atom (a K class's STEPS):
        a constant quotient ``q`` (the ratio of the atom's coefficients, or one less) with
        ``0 <= a - q * b < b`` proved under the path's facts; else unsupported."""
        if len(b.terms) != 1:
            raise Unsupported(self.where(node), "integer // or % by a non-constant")
        ((k, cb),) = b.terms
        ca = dict(a.terms).get(k, 0)
        if cb <= 0 or decide_under(self.facts(), T.cmp(">", b, T.ZERO)) is not True:
            raise Unsupported(self.where(node), f"integer // or % by a possibly non-positive {b}")
        for q in (ca // cb, ca // cb - 1):
            r = a.add(b.scale(q), -1)
            inside = T.c_and(T.cmp(">=", r, T.ZERO), T.cmp("<", r, b))
            if decide_under(self.facts(), inside) is True:
                return T.const(q), r
        raise Unsupported(self.where(node), f"integer // or % of {a} by {b}: quotient undecided")

    def unary(self, e, v):
        if not isinstance(v, Tile):
            return {ast.USub: lambda x: -x, ast.Not: lambda x: not x, ast.UAdd: lambda x: x,
                    ast.Invert: lambda x: ~x}[type(e.op)](v)  # fmt: skip
        if W.involved(v):
            return W.unary(e.op, v, self.where(e))
        if isinstance(e.op, ast.USub):
            if v.kind == "int":
                return Tile("int", v.dims, v.v.scale(-1), v.dtype)
            if v.kind == "float":
                return Tile("float", v.dims, T.op("neg", v.dtype, v.v), v.dtype)
        raise Unsupported(self.where(e), f"unary {type(e.op).__name__} on a tensor")

    def compare(self, op, a, b, node):
        if not isinstance(a, Tile) and not isinstance(b, Tile):
            return _PY_CMP[type(op)](a, b)
        a, b = self.lift(a), self.lift(b)
        dims, (va, vb) = self.broadcast([a, b], node)
        if a.kind == "int" and b.kind == "int":
            sym = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==",
                   ast.NotEq: "!="}[type(op)]  # fmt: skip
            return Tile("bool", dims, T.cmp(sym, va, vb), "i1")
        if {a.kind, b.kind} <= {"int", "float", W.WORD} and {a.kind, b.kind} & {"float", W.WORD}:
            # data-dependent: an uninterpreted predicate of the operands (words.compare)
            return W.compare(op, dims, a, b, va, vb, self.where(node), self.as_float)
        raise Unsupported(self.where(node), f"comparison of {a.kind} and {b.kind} tensors")

    # --- calls ----------------------------------------------------------------------
    def call(self, e: ast.Call, env):
        if isinstance(e.func, ast.Attribute) and e.func.attr == "to":
            obj = self.expr(e.func.value, env)
            kw = {k.arg: self.expr(k.value, env) for k in e.keywords}
            return self.to(obj, [self.expr(a, env) for a in e.args], e, kw)
        if isinstance(e.func, ast.Attribute) and e.func.attr == "load":
            obj = self.expr(e.func.value, env) if self.func_name(e.func) != "tl.load" else None
            if isinstance(obj, Tile) and obj.kind == "desc":
                return desc_load(self, e, obj, [self.expr(a, env) for a in e.args])
        name = self.func_name(e.func)
        if name == "float" and len(e.args) == 1 and not e.keywords:
            v = self.expr(e.args[0], env)
            if isinstance(v, str | int | float) and not isinstance(v, bool):
                return float(v)
            raise Unsupported(self.where(e), "float() of a runtime value")
        if name in self.ex.src.functions:
            return self.inline(self.ex.src.functions[name], e, env)
        if name == "tl.inline_asm_elementwise":
            return inline_asm(self, e, env)
        if name in self.ex.src.imports:
            raise Unsupported(self.where(e), f"{name} is imported from {self.ex.src.imports[name]}"
                              ", which is not among the files proved against")  # fmt: skip
        short = name.split(".")[-1]
        if name.startswith("tl.") and short in NONDETERMINISTIC:
            raise Unsupported(
                self.where(e),
                f"{name}: the order of its updates/values depends on scheduling "
                "(non-deterministic); not allowed in an invariant kernel",
            )
        args = [self.expr(a, env) for a in e.args]
        kw = {k.arg: self.expr(k.value, env) for k in e.keywords}
        handler = TL.get(name)
        if handler is None:
            raise Unsupported(self.where(e), f"{name} is not supported by the prover")
        return handler(self, e, args, kw)

    def inline(self, fn: ast.FunctionDef, e: ast.Call, env):
        params = [a.arg for a in fn.args.args]
        if e.keywords or len(e.args) > len(params):
            raise Unsupported(self.where(e), "helper call: positional arguments only")
        defaults = fn.args.defaults
        scope = {}
        for i, p in enumerate(params):
            if i < len(e.args):
                scope[p] = self.expr(e.args[i], env)
            else:
                j = i - (len(params) - len(defaults))
                if j < 0:
                    raise Unsupported(self.where(e), f"missing argument {p!r}")
                scope[p] = self.expr(defaults[j], env)
        caller, self.file = self.file, self.ex.src.files.get(fn.name, self.ex.src.filename)
        try:
            self.block(fn.body, scope)
        except _Return as r:
            return r.value
        finally:
            self.file = caller  # lines of a helper are reported in the helper's own file
        return None

    def to(self, obj, args, node, kw=None):
        kw = kw or {}
        if set(kw) - {"bitcast", "fp_downcast_rounding"} or kw.get("fp_downcast_rounding"):
            raise Unsupported(self.where(node), f".to keyword(s) {sorted(kw)}: only bitcast")
        bitcast = kw.get("bitcast", False)
        if not isinstance(bitcast, bool):
            raise Unsupported(self.where(node), ".to bitcast must be a constant")
        if len(args) == 1 and isinstance(args[0], tuple) and args[0][:1] == ("dtype-of",):
            args = [DType(args[0][1].dtype)]
        if len(args) != 1 or not isinstance(args[0], DType):
            raise Unsupported(self.where(node), ".to(dtype) with one dtype argument")
        dt = args[0].name
        if not isinstance(obj, Tile):
            obj = self.lift(obj)
        if bitcast:
            return W.bitcast(obj, dt, self.where(node))
        if obj.kind == W.WORD or (obj.kind == "float" and dt not in FLOAT_RANK):
            return W.convert(obj, dt, self.where(node))
        if obj.kind == "float":
            return Tile("float", obj.dims, T.cast(obj.v, dt), dt)
        if obj.kind == "int":
            if dt in FLOAT_RANK:
                return Tile("float", obj.dims, self.as_float(obj, obj.v, dt), dt)
            return Tile("int", obj.dims, obj.v, dt)
        raise Unsupported(self.where(node), f".to on a {obj.kind}")

    def reduce_axis(self, t: Tile, axis: int, node) -> tuple[tuple, tuple]:
        """The dims left after reducing ``axis``, and that axis' (size, lane key or None)."""
        dims = list(t.dims)
        if not -len(dims) <= axis < len(dims):
            raise Unsupported(self.where(node), "reduction axis out of range")
        return tuple(dims[: axis % len(dims)] + dims[axis % len(dims) + 1 :]), dims[axis]

    def elems(self, t: Tile, axis: int, node) -> tuple[tuple, list]:
        """The values along ``axis`` (lane substituted by 0..n-1) and the remaining dims."""
        dims, (size, lane) = self.reduce_axis(t, axis, node)
        if lane is None:
            vals = [t.v] * size
        else:
            vals = [self.subst_val(t, {lane: T.const(q)}) for q in range(size)]
        return dims, vals


def _shape_quotient(a: Lin, c: int) -> Lin | None:
    """``a // c`` exactly when every atom of ``a`` is a shape symbol and ``a`` is a multiple
    of ``c`` term by term (``RANGE_K // BLOCK_K`` = STEPS for RANGE_K = 64 * STEPS); else None."""
    if a.is_const() or a.const % c or any(v % c for _, v in a.terms):
        return None
    if not all(str(T.atom(k)).startswith(SHAPE_PREFIX) for k, _ in a.terms):
        return None
    return Lin(tuple((k, v // c) for k, v in a.terms), a.const // c)
