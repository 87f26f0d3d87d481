"""Front end and symbolic executor of the Triton subset the linear and row kernels use.

Front end: the Python ``ast`` of the kernel's source file. ``@triton.jit`` functions are
found by their decorator; a call to another ``@triton.jit`` function of the same file (or of a
sibling kernel file joined to it, :meth:`KernelSource.join`: an imported helper) is inlined
(its body is executed in a fresh scope with the caller's values). Anything outside the
supported subset raises :class:`Unsupported` with ``file:line`` and the reason.

Execution evaluates ONE generic element: program ids are symbolic (Z3 integers bounded by the
grid), every ``tl.arange`` is a symbolic lane index, and a tile value is an expression of its
lane indices (nothing is materialized). Loops with constant bounds are unrolled; a branch or
loop bound that depends on a runtime value forks the execution (one path per feasible case,
each with its path condition). ``tl.dot`` follows an explicit hardware model (see
``DOT_ATOM``); ``tl.sum`` is a function of its layout.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.terms import Lin, Term

DOT_ATOM = 16  # tl.dot hardware model: a left-to-right chain over k-atoms of 16
MAX_FORK_VALUES = 16
SMALL_GRID = 4  # grid axes of at most this many programs (the split axis) run per program id

FLOAT_RANK = {"fp16": 1, "bf16": 1, "fp32": 2, "fp64": 3}
DTYPES = {
    "float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
    "int32": "i32", "int64": "i64", "int16": "i16", "int8": "i8", "int1": "i1",
}  # fmt: skip
NONDETERMINISTIC = {
    "atomic_add", "atomic_max", "atomic_min", "atomic_cas", "atomic_xchg", "atomic_and",
    "atomic_or", "atomic_xor", "rand", "randn", "randint", "rand4x", "randint4x",
}  # fmt: skip
UNARY_FLOAT = {
    "sqrt_rn": "sqrt_rn", "exp2": "exp2", "exp": "exp", "log": "log", "log2": "log2",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "sin": "sin", "cos": "cos", "abs": "abs",
}  # fmt: skip
BINARY_FLOAT = {"div_rn": "div_rn"}


class Unsupported(Exception):
    """A construct the prover does not model: rejected, never skipped."""

    def __init__(self, where: str, reason: str):
        super().__init__(f"{where}: {reason}")
        self.where = where
        self.reason = reason


class _Return(Exception):
    def __init__(self, value):
        self.value = value


# --- values ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DType:
    name: str


@dataclass(frozen=True)
class Tile:
    """kind: int | bool | float | ptr. dims: ((size, lane atom key or None), ...)."""

    kind: str
    dims: tuple
    v: Any
    dtype: str


@dataclass(frozen=True)
class ArrayArg:
    name: str
    dtype: str


@dataclass(frozen=True)
class DescArg:
    """A TMA tensor descriptor over a row-major [rows, cols] array, read in [block] boxes;
    elements outside the array read as +0.0 (the hardware's zero fill)."""

    name: str
    dtype: str
    rows: Any  # Lin or int
    cols: int
    block: tuple[int, int]


@dataclass(frozen=True)
class FloatArg:
    name: str


@dataclass(frozen=True)
class CDiv:
    """Grid size ``ceil(num / den)`` with a symbolic numerator."""

    num: Lin
    den: int


@dataclass
class KernelCall:
    kernel: str
    grid: tuple
    args: dict
    num_warps: int = 4
    symbolic_axes: tuple = ()  # grid axes run as one symbolic program even when small


@dataclass
class Store:
    call: int
    array: str
    offset: Lin
    value: Any  # Term, or Lin for integer stores
    mask: Any
    path: tuple
    wvars: tuple  # atom keys of symbolic program ids and lanes
    ranges: dict  # atom key -> (lo Lin, hi Lin)
    pids: tuple  # Lin per grid axis
    seq: int
    where: str


@dataclass
class Load:
    call: int
    array: str
    index: Lin
    mask: Any
    path: tuple
    pids: tuple
    seq: int
    where: str


@dataclass
class KernelSource:
    """A parsed kernel file: its ``@triton.jit`` functions and module-level constants."""

    source: str
    filename: str
    functions: dict = field(default_factory=dict)
    constants: dict = field(default_factory=dict)
    files: dict = field(default_factory=dict)  # kernel name -> file, for added functions
    # names imported from sibling kernel modules (``from samebits.kernels.triton.<module>
    # import name``): name -> that module's file
    imports: dict = field(default_factory=dict)

    @staticmethod
    def parse(source: str, filename: str = "<kernel>") -> KernelSource:
        ks = KernelSource(source, filename)
        tree = ast.parse(source, filename)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and any(_is_jit(d) for d in node.decorator_list):
                ks.functions[node.name] = node
            elif isinstance(node, ast.ImportFrom) and _kernel_module(node):
                for alias in node.names:
                    if alias.asname not in (None, alias.name):
                        raise Unsupported(f"{filename}:{node.lineno}", "import ... as ...")
                    ks.imports[alias.name] = _kernel_module(node)
            elif (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and isinstance(node.value, ast.Constant)
            ):
                ks.constants[node.targets[0].id] = node.value.value
        return ks

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def with_functions(self, other: KernelSource) -> KernelSource:
        """This file's functions plus ``other``'s (a goal's reference kernels); the source and
        its SHA-256 stay this file's."""
        ks = KernelSource(self.source, self.filename, dict(self.functions), dict(self.constants),
                          dict(self.files), dict(self.imports))  # fmt: skip
        for name, fn in other.functions.items():
            if name in ks.functions:
                raise Unsupported(other.filename, f"{name} is also defined in {self.filename}")
            ks.functions[name] = fn
            ks.files[name] = other.filename
        return ks

    def join(self, others: list[KernelSource]) -> KernelSource:
        """This file's functions plus those of the sibling kernel files ``others`` (a fused
        kernel's imported helpers, the op-by-op path it is proved against); the source and
        its SHA-256 stay this file's. Invariant: every name a joined file imports from a
        sibling module is a ``@triton.jit`` function of that very file among the joined ones
        (so each helper is the one Python would import), and no name is defined twice."""
        ks = self
        for other in others:
            ks = ks.with_functions(other)
            for name, value in other.constants.items():
                if ks.constants.setdefault(name, value) != value:
                    raise Unsupported(other.filename, f"constant {name} differs between files")
        for src in (self, *others):
            for name, module in src.imports.items():
                if ks.files.get(name, self.filename) != module or name not in ks.functions:
                    raise Unsupported(src.filename, f"imports {name} from {module}: not a "
                                      "@triton.jit function of the files proved against")  # fmt: skip
        return ks


KERNEL_PACKAGE = "samebits.kernels.triton"


def _kernel_module(node: ast.ImportFrom) -> str | None:
    """The file of a sibling kernel module an import names (absolute or relative), else None
    (``triton``, ``__future__``: not kernel code)."""
    mod = node.module or ""
    if node.level == 0 and mod.startswith(KERNEL_PACKAGE + "."):
        mod = mod[len(KERNEL_PACKAGE) + 1 :]
    elif node.level != 1:
        return None
    return f"{mod}.py" if mod and "." not in mod else None


def _is_jit(d: ast.expr) -> bool:
    if isinstance(d, ast.Call):
        d = d.func
    return (isinstance(d, ast.Attribute) and d.attr == "jit") or (
        isinstance(d, ast.Name) and d.id == "jit"
    )


# --- solver helpers ---------------------------------------------------------------------


class Oracle:
    """Validity questions under a fixed list of facts, memoized."""

    def __init__(self, facts: list):
        self.solver = z3.Solver()
        self.solver.set("timeout", 20000)
        for f in facts:
            self.solver.add(f)
        self.cache: dict = {}

    def valid(self, f) -> bool:
        # keyed by the AST id, the formula kept alive with the answer: a freed AST's id is
        # reused by Z3, so an id alone could return another formula's answer
        key = f.get_id()
        hit = self.cache.get(key)
        if hit is None:
            hit = (f, self.check_unsat([z3.Not(f)]))
            self.cache[key] = hit
        return hit[1]

    def check_unsat(self, extra: list) -> bool:
        """The facts and ``extra`` are inconsistent. The incremental solver may answer
        'unknown' on integer div/mod where a fresh one decides: retried once fresh."""
        self.solver.push()
        self.solver.add(*extra)
        r = self.solver.check()
        self.solver.pop()
        if r == z3.unknown:
            s = z3.Solver()
            s.set("timeout", 60000)
            s.add(*self.solver.assertions(), *extra)
            r = s.check()
        return r == z3.unsat

    def decide(self, c):
        if c is True or c is False:
            return c
        f = T.cond_z3(c)
        if self.valid(f):
            return True
        if self.valid(z3.Not(f)):
            return False
        return None


def decide_under(facts: list, c):
    if c is True or c is False:
        return c
    s = z3.Solver()
    s.set("timeout", 20000)
    s.add(*facts)
    f = T.cond_z3(c)
    s.push()
    s.add(z3.Not(f))
    if s.check() == z3.unsat:
        return True
    s.pop()
    s.add(f)
    if s.check() == z3.unsat:
        return False
    return None


# --- the executor ----------------------------------------------------------------------


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
        self.int_reduce_facts = None  # (name, result Lin) -> extra facts (preconditions)
        # "lane-reduce" (the default: linear and row goals); the attention goals replace it
        # by "max-any-order", "sum-of-zeros" (rules that look at the elements one by one)
        self.rules: frozenset = frozenset({"lane-reduce"})
        self.bound_lanes: set = set()  # atom keys of the bound lanes with range facts
        # a product of two runtime integers as an uninterpreted function (sound for proving
        # equalities; keeps Z3 in linear arithmetic)
        self.opaque_mul = False

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
            decisions: list[int] = []
            while True:
                prog = _Program(self, ci, call, grid, pid_vars, decisions)
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


class RaceError(Exception):
    def __init__(self, msg, model):
        super().__init__(msg)
        self.model = model


def _active(st: Store, sub: dict, target: Lin) -> list:
    """Z3 facts: the store ``st`` (variables renamed by ``sub``) writes ``target``."""
    out = []
    for k, (lo, hi) in st.ranges.items():
        x = sub[k] if k in sub else Lin(((k, 1),), 0)
        out += [x.z3() >= T.subst_lin(lo, sub).z3(), x.z3() < T.subst_lin(hi, sub).z3()]
    out += [T.cond_z3(T.subst_cond(c, sub)) for c in st.path]
    out.append(T.cond_z3(T.subst_cond(st.mask, sub)))
    out.append(T.subst_lin(st.offset, sub).z3() == target.z3())
    return out


def witness(st: Store, target: Lin) -> dict | None:
    """Program ids and lanes of the store that writes ``target``, as mixed-radix digits of
    ``target`` (``None`` when the store's offset is not of that form)."""
    wv = set(st.wvars)
    coefs, rest = [], T.const(st.offset.const)
    for k, c in st.offset.terms:
        if k in wv:
            coefs.append((c, k))
        else:
            e = T.atom(k)
            if e.num_args() and any(T.atom_key(v) in wv for v in T.z3_vars(e)):
                return None
            rest = rest.add(Lin(((k, c),), 0))
    if {k for _, k in coefs} != wv or any(c <= 0 for c, _ in coefs):
        return None
    coefs.sort(reverse=True)
    if len({c for c, _ in coefs}) != len(coefs):
        return None
    r = target.add(rest, -1)
    sub = {}
    for c, k in coefs:
        sub[k] = T.floordiv(r, T.const(c))
        r = T.mod(r, T.const(c))
    return sub


class _Program:
    """One path of one program of one kernel call."""

    def __init__(self, ex: Execution, ci: int, call: KernelCall, grid, pid_vars, decisions):
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
        if not (
            isinstance(it, ast.Call) and self.func_name(it.func) in ("range", "tl.static_range")
        ):
            raise Unsupported(self.where(s), "only range / tl.static_range loops")
        if it.keywords:
            raise Unsupported(self.where(s), "range keywords")
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
        if t.kind == "float":
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
        # float arithmetic: promote, then an uninterpreted function of the operands
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
            raise Unsupported(self.where(node), "integer // or % by a non-constant")
        if not a.is_const() and decide_under(self.facts(), T.cmp(">=", a, T.ZERO)) is not True:
            raise Unsupported(self.where(node), f"integer // or % of a possibly negative {a}")
        return fn(a, b)

    def unary(self, e, v):
        if not isinstance(v, Tile):
            return {ast.USub: lambda x: -x, ast.Not: lambda x: not x, ast.UAdd: lambda x: x}[
                type(e.op)
            ](v)
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
        raise Unsupported(self.where(node), "comparison of non-integer tensors")

    # --- calls ----------------------------------------------------------------------
    def call(self, e: ast.Call, env):
        if isinstance(e.func, ast.Attribute) and e.func.attr == "to":
            obj = self.expr(e.func.value, env)
            return self.to(obj, [self.expr(a, env) for a in e.args], e)
        if isinstance(e.func, ast.Attribute) and e.func.attr == "load":
            obj = self.expr(e.func.value, env) if self.func_name(e.func) != "tl.load" else None
            if isinstance(obj, Tile) and obj.kind == "desc":
                return _desc_load(self, e, obj, [self.expr(a, env) for a in e.args])
        name = self.func_name(e.func)
        if name == "float" and len(e.args) == 1 and not e.keywords:
            v = self.expr(e.args[0], env)
            if isinstance(v, str | int | float) and not isinstance(v, bool):
                return float(v)
            raise Unsupported(self.where(e), "float() of a runtime value")
        if name in self.ex.src.functions:
            return self.inline(self.ex.src.functions[name], e, env)
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
        handler = _TL.get(name)
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

    def to(self, obj, args, node):
        if len(args) == 1 and isinstance(args[0], tuple) and args[0][:1] == ("dtype-of",):
            args = [DType(args[0][1].dtype)]
        if len(args) != 1 or not isinstance(args[0], DType):
            raise Unsupported(self.where(node), ".to(dtype) with one dtype argument")
        dt = args[0].name
        if not isinstance(obj, Tile):
            obj = self.lift(obj)
        if obj.kind == "float":
            if dt in FLOAT_RANK:
                return Tile("float", obj.dims, T.cast(obj.v, dt), dt)
            raise Unsupported(self.where(node), "float -> int cast")
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


def _tl_program_id(p: _Program, e, args, kw):
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


def _tl_arange(p: _Program, e, args, kw):
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


def _filled(p: _Program, e, shape, value, dtype):
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


def _tl_load(p: _Program, e, args, kw):
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


def _desc_load(p: _Program, e, desc: Tile, args) -> Tile:
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
    idx = row.scale(cols).add(col)
    mask = T.c_and(T.cmp("<", row, rows), T.cmp("<", col, T.const(cols)))
    dt = desc.dtype
    p.ex.loads.append(
        Load(
            p.ci, array, idx, mask, tuple(p.path), tuple(p.pids_or_zero()), next(p.seq), p.where(e)
        )  # fmt: skip
    )
    value = p.read(array, idx, mask, dt, e)
    return Tile("float", tuple(dims), T.ite(mask, value, T.fconst(0.0, dt)), dt)


def _tl_store(p: _Program, e, args, kw):
    ptr = args[0] if args else kw["pointer"]
    val = args[1] if len(args) > 1 else kw["value"]
    mask = kw.get("mask", args[2] if len(args) > 2 else None)
    if set(kw) - {"pointer", "value", "mask"}:
        raise Unsupported(p.where(e), "tl.store keywords other than mask")
    if not (isinstance(ptr, Tile) and ptr.kind == "ptr"):
        raise Unsupported(p.where(e), "tl.store to a non-pointer")
    val = p.lift(val, Tile("float", (), None, ptr.dtype) if ptr.dtype in FLOAT_RANK else None)
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


def _tl_dot(p: _Program, e, args, kw):
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
    av = [T.subst_term(a.v, {ka: T.const(q)}) for q in range(k)]
    bv = [T.subst_term(b.v, {kb: T.const(q)}) for q in range(k)]
    dims = (m, n)
    if acc is None:
        cur = T.fconst(0.0, out_dt)
    else:
        acc = p.lift(acc)
        dims, vals = p.broadcast([Tile("int", dims, T.ZERO, "i32"), acc], e)
        if acc.kind != "float":
            raise Unsupported(p.where(e), "tl.dot accumulator must be float")
        cur = T.cast(vals[1], out_dt)
    for g in range(0, k, DOT_ATOM):
        cur = T.Term(
            "dot16",
            (cur, tuple(av[g : g + DOT_ATOM]), tuple(bv[g : g + DOT_ATOM]), prec),
            out_dt,
        )
    return Tile("float", dims, cur, out_dt)


def _tl_where(p: _Program, e, args, kw):
    c, a, b = args
    c = p.lift(c)
    like = a if isinstance(a, Tile) else b if isinstance(b, Tile) else None
    a, b = p.lift(a, like), p.lift(b, like)
    dims, (vc, va, vb) = p.broadcast([c, a, b], e)
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
    def f(p: _Program, e, args, kw):
        a, b = args[0], args[1]
        like = a if isinstance(a, Tile) else b
        a, b = p.lift(a, like), p.lift(b, like)
        dims, (va, vb) = p.broadcast([a, b], e)
        if a.kind == "int" and b.kind == "int":
            fn = T.minimum if name == "min" else T.maximum
            return Tile("int", dims, fn(va, vb), "i64" if "i64" in (a.dtype, b.dtype) else "i32")
        dt = max([t.dtype for t in (a, b) if t.kind == "float"], key=lambda d: FLOAT_RANK[d])
        return Tile("float", dims, T.op(name, dt, p.as_float(a, va, dt), p.as_float(b, vb, dt)), dt)

    return f


def _reduce(name):
    def f(p: _Program, e, args, kw):
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


def _lane_reduce(p: _Program, e, name: str, layout: tuple, x: Tile, axis: int) -> Tile | None:
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
    global _IMUL
    if _IMUL is None:
        _IMUL = z3.Function("imul", z3.IntSort(), z3.IntSort(), z3.IntSort())
    return Lin.var(_IMUL(a.z3(), b.z3()))


def _from_zero_dot(t: Term) -> bool:
    """A tl.dot chain whose accumulator starts at the constant +0.0."""
    while t.op == "dot16":
        t = t.args[0]
    return T.is_pos_zero(t)


def _int_reduce(p: _Program, e, name: str, x: Tile, axis: int) -> Tile:
    """Integer tl.max / tl.min along an axis: exact (order-independent for integers). The result
    is a fresh integer bounded by the element at each of the execution's focus lanes (a sound
    subset of "the maximum of the elements": the other elements' bounds are not needed by the
    goals and only slow the solver down)."""
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
    if p.ex.int_reduce_facts is not None:
        p.ex.facts += p.ex.int_reduce_facts(name, red)
    return Tile("int", dims, red, x.dtype)


def _unary(name):
    def f(p: _Program, e, args, kw):
        x = p.lift(args[0])
        if x.kind != "float":
            raise Unsupported(p.where(e), f"{name} of a non-float")
        return Tile("float", x.dims, T.op(name, x.dtype, x.v), x.dtype)

    return f


def _binary(name):
    def f(p: _Program, e, args, kw):
        like = args[0] if isinstance(args[0], Tile) else args[1]
        a, b = p.lift(args[0], like), p.lift(args[1], like)
        dims, (va, vb) = p.broadcast([a, b], e)
        dt = max([t.dtype for t in (a, b) if t.kind == "float"], key=lambda d: FLOAT_RANK[d])
        return Tile("float", dims, T.op(name, dt, p.as_float(a, va, dt), p.as_float(b, vb, dt)), dt)

    return f


def _tl_trans(p, e, args, kw):
    x = args[0]
    if len(x.dims) != 2:
        raise Unsupported(p.where(e), "tl.trans of a 2-D tile only")
    return Tile(x.kind, (x.dims[1], x.dims[0]), x.v, x.dtype)


_TL = {
    "tl.program_id": _tl_program_id,
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
for _n, _s in UNARY_FLOAT.items():
    _TL[f"tl.{_n}"] = _unary(_s)
    _TL[f"tl.math.{_n}"] = _unary(_s)
for _n, _s in BINARY_FLOAT.items():
    _TL[f"tl.{_n}"] = _binary(_s)
    _TL[f"tl.math.{_n}"] = _binary(_s)

_PY_BINOPS = {
    ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
    ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b,
    ast.Div: lambda a, b: a / b, ast.BitXor: lambda a, b: a ^ b,
    ast.BitAnd: lambda a, b: a & b, ast.BitOr: lambda a, b: a | b,
}  # fmt: skip
_PY_CMP = {
    ast.Lt: lambda a, b: a < b, ast.LtE: lambda a, b: a <= b, ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b, ast.Eq: lambda a, b: a == b, ast.NotEq: lambda a, b: a != b,
}  # fmt: skip


def _pids_or_zero(self: _Program):
    return [x if x is not None else T.ZERO for x in self.pids]


def _all_lanes(self: _Program):
    return list(self.lanes)


def _read(self: _Program, array: str, idx: Lin, mask, dtype: str, node):
    """A read of ``array[idx]`` (assumed where ``mask`` holds): an intermediate written by an
    earlier call of this launch resolves to its writer's value; inputs go through the goal's
    relation between the two executions."""
    ambient = [*self.facts(), T.cond_z3(mask)]
    if self.ex.read_hook is not None:
        hit = self.ex.read_hook(self, array, idx, mask, dtype, ambient)
        if hit is not None:
            return hit
    earlier = [s for s in self.ex.stores if s.array == array and s.call < self.ci]
    if earlier:
        # the latest call that wrote the element is the one the read sees (stream order)
        calls = sorted({s.call for s in earlier}, reverse=True)
        groups = [[s for s in earlier if s.call == c] for c in calls]
        return _resolve(self, groups, array, idx, ambient, node)
    if self.ex.remap is not None:
        array, idx = self.ex.remap(array, idx, ambient, self.where(node))
    if dtype in FLOAT_RANK:
        return T.read(array, idx, dtype)
    f = z3.Function(f"mem.{array}", z3.IntSort(), z3.IntSort())
    return Lin.var(f(idx.z3()))


def _resolve(self: _Program, groups: list, array: str, idx: Lin, ambient: list, node):
    """The value of ``array[idx]`` written by the stores of ``groups`` (one list per kernel
    call, latest first): the writer of the latest call that wrote it; where that call may not
    have written it, the earlier calls' value (a select)."""
    group, rest = groups[0], groups[1:]
    cands = []
    for st in group:
        sub = witness(st, idx)
        if sub is None:
            raise Unsupported(self.where(node), f"cannot invert the store to {array} at {st.where}")
        f = z3.And(_active(st, sub, idx))
        s = z3.Solver()
        s.set("timeout", 20000)
        s.add(*ambient)
        s.push()
        s.add(f)
        res = s.check()
        s.pop()
        if res == z3.unsat:
            continue
        val = st.value
        val = T.subst_term(val, sub) if isinstance(val, Term) else T.subst_lin(val, sub)
        s.add(z3.Not(f))
        if s.check() == z3.unsat:
            return val
        cands.append((f, val))
    covered = z3.Or([f for f, _ in cands] or [z3.BoolVal(False)])
    s = z3.Solver()
    s.set("timeout", 20000)
    s.add(*ambient)
    s.add(z3.Not(covered))
    if s.check() != z3.unsat:
        if not rest:
            raise Unsupported(
                self.where(node), f"{array}[{idx}] may be read where no program wrote it"
            )
        out = _resolve(self, rest, array, idx, [*ambient, z3.Not(covered)], node)
        if not cands:
            return out
    else:
        out = cands.pop()[1]
    # the writer depends on the element: a select over the candidate writers
    for f, val in reversed(cands):
        out = (
            T.ite(("z3", f), val, out) if isinstance(val, Term) else T.ite_int(("z3", f), val, out)
        )
    return out


_Program.pids_or_zero = _pids_or_zero
_Program.all_lanes = _all_lanes
_Program.read = _read
