"""Value terms of the kernel prover: exact integer index arithmetic, conditions, float terms.

- :class:`Lin` is an integer expression in linear normal form ``sum(coef * atom) + const``.
  An atom is a Z3 integer term: a variable (program id, lane index, a runtime integer such as
  M) or an opaque non-linear term (a product of two unknowns, ``div``/``mod``, ``min``/``max``,
  an integer read from memory). Normal forms make equal index arithmetic syntactically equal
  and let the prover memoize solver questions on the non-constant part of an expression.
- Conditions are Python ``bool`` or tuples ``("cmp", op, lin)`` (``lin op 0``), ``("and", ...)``,
  ``("or", ...)``, ``("not", c)``; comparisons of constants fold at construction.
- :class:`Term` is a hash-consed float value: every floating-point operation is an
  uninterpreted function symbol (equal operands give an equal result; nothing else is assumed).
"""

from __future__ import annotations

import struct

import z3

_ATOMS: dict[int, z3.ArithRef] = {}


def atom_key(e: z3.ArithRef) -> int:
    k = e.get_id()
    _ATOMS.setdefault(k, e)
    return k


def atom(k: int) -> z3.ArithRef:
    return _ATOMS[k]


class Lin:
    """``sum(coef * atom) + const`` over Z3 integer atoms (keyed by Z3 AST id)."""

    __slots__ = ("terms", "const", "_h", "_z3")

    def __init__(self, terms: dict[int, int] | tuple = (), const: int = 0):
        if isinstance(terms, dict):
            terms = tuple(sorted((k, c) for k, c in terms.items() if c != 0))
        self.terms: tuple[tuple[int, int], ...] = terms
        self.const = int(const)
        self._h = hash((self.terms, self.const))
        self._z3 = None

    # --- construction -------------------------------------------------------------------
    @staticmethod
    def var(e: z3.ArithRef) -> Lin:
        return Lin(((atom_key(e), 1),), 0)

    @staticmethod
    def of_z3(e: z3.ArithRef) -> Lin:
        """Normal form of a Z3 integer expression (simplified first)."""
        e = z3.simplify(e)
        return _lin_of_z3(e)

    def is_const(self) -> bool:
        return not self.terms

    def __eq__(self, other):
        return isinstance(other, Lin) and self.terms == other.terms and self.const == other.const

    def __hash__(self):
        return self._h

    def __repr__(self):
        parts = [f"{c}*{atom(k)}" if c != 1 else str(atom(k)) for k, c in self.terms]
        if self.const or not parts:
            parts.append(str(self.const))
        return " + ".join(parts)

    def add(self, other: Lin, sign: int = 1) -> Lin:
        if not other.terms:
            return Lin(self.terms, self.const + sign * other.const)
        d = dict(self.terms)
        for k, c in other.terms:
            d[k] = d.get(k, 0) + sign * c
        return Lin(d, self.const + sign * other.const)

    def scale(self, c: int) -> Lin:
        if c == 0:
            return Lin((), 0)
        return Lin(tuple((k, v * c) for k, v in self.terms), self.const * c)

    def var_part(self) -> tuple:
        return self.terms

    def z3(self) -> z3.ArithRef:
        if self._z3 is None:
            acc = [atom(k) * c if c != 1 else atom(k) for k, c in self.terms]
            if self.const or not acc:
                acc.append(z3.IntVal(self.const))
            self._z3 = acc[0] if len(acc) == 1 else z3.Sum(acc)
        return self._z3

    def atoms(self) -> list[int]:
        return [k for k, _ in self.terms]


def _lin_of_z3(e) -> Lin:
    if z3.is_int_value(e):
        return Lin((), e.as_long())
    if z3.is_add(e):
        out = Lin((), 0)
        for ch in e.children():
            out = out.add(_lin_of_z3(ch))
        return out
    if z3.is_sub(e):
        ch = e.children()
        out = _lin_of_z3(ch[0])
        for c in ch[1:]:
            out = out.add(_lin_of_z3(c), -1)
        return out
    if z3.is_mul(e):
        consts, rest = 1, []
        for ch in e.children():
            if z3.is_int_value(ch):
                consts *= ch.as_long()
            else:
                rest.append(ch)
        if not rest:
            return Lin((), consts)
        if len(rest) == 1:
            return _lin_of_z3(rest[0]).scale(consts)
        prod = rest[0]
        for r in rest[1:]:
            prod = prod * r
        return Lin.var(prod).scale(consts)
    if e.decl().kind() == z3.Z3_OP_UMINUS:
        return _lin_of_z3(e.children()[0]).scale(-1)
    return Lin.var(e)


ZERO = Lin((), 0)


def const(v: int) -> Lin:
    return Lin((), v)


# --- non-linear integer operations (opaque atoms) ---------------------------------------


def mul(a: Lin, b: Lin) -> Lin:
    """``a * b``; a non-linear product is one atom, its factors first recombined by
    `fold_divmod` (``c*(x div c) + x mod c`` is ``x``), so equal products are equal atoms."""
    if a.is_const():
        return b.scale(a.const)
    if b.is_const():
        return a.scale(b.const)
    a, b = fold_divmod(a), fold_divmod(b)
    return Lin.of_z3(a.z3() * b.z3())


def floordiv(a: Lin, b: Lin) -> Lin:
    """Integer division; index arithmetic is on non-negative values (checked by callers)."""
    if a.is_const() and b.is_const():
        return const(int(a.const / b.const) if a.const * b.const < 0 else a.const // b.const)
    return Lin.of_z3(a.z3() / b.z3())


def mod(a: Lin, b: Lin) -> Lin:
    if a.is_const() and b.is_const():
        return const(a.const - b.const * int(a.const / b.const))
    return Lin.of_z3(a.z3() % b.z3())


def xor(a: Lin, b: Lin) -> Lin:
    if a.is_const() and b.is_const():
        return const(a.const ^ b.const)
    bits = 64
    e = z3.BV2Int(z3.Int2BV(a.z3(), bits) ^ z3.Int2BV(b.z3(), bits))
    return Lin.of_z3(e)


def ite_int(c, a: Lin, b: Lin) -> Lin:
    if c is True:
        return a
    if c is False:
        return b
    if a == b:
        return a
    return Lin.of_z3(z3.If(cond_z3(c), a.z3(), b.z3()))


def minimum(a: Lin, b: Lin) -> Lin:
    if a.is_const() and b.is_const():
        return const(min(a.const, b.const))
    return ite_int(cmp("<=", a, b), a, b)


def maximum(a: Lin, b: Lin) -> Lin:
    if a.is_const() and b.is_const():
        return const(max(a.const, b.const))
    return ite_int(cmp(">=", a, b), a, b)


def subst_lin(x: Lin, mapping: dict[int, Lin], _cache: dict | None = None) -> Lin:
    """Replace atoms (variables) by linear forms; compound atoms are rebuilt through Z3."""
    if not mapping or not x.terms:
        return x
    touched = False
    for k, _ in x.terms:
        if k in mapping or not _atom_vars(k).isdisjoint(mapping):
            touched = True
            break
    if not touched:
        return x
    out = Lin((), x.const)
    for k, c in x.terms:
        if k in mapping:
            out = out.add(mapping[k].scale(c))
            continue
        vs = _atom_vars(k)
        if vs.isdisjoint(mapping):  # a variable, or a compound atom of unmapped variables
            out = out.add(Lin(((k, c),), 0))
            continue
        rel = tuple(sorted((v, mapping[v]) for v in vs if v in mapping))
        key = (k, rel)
        hit = _SUBST.get(key)
        if hit is None:
            hit = _SUBST[key] = _subst_atom(k, rel, mapping)
        out = out.add(hit.scale(c))
    return fold_divmod(out)


def _subst_atom(k: int, rel: tuple, mapping: dict[int, Lin]) -> Lin:
    """Compound atom ``k`` with its mapped variables replaced: a ``div`` / ``mod`` by a
    constant through its argument's Lin (so `fold_divmod` also applies inside it), any other
    atom through Z3."""
    dm = _divmod_atom(k)
    if dm is not None:  # Z3's div / mod (Euclidean; c > 0: Python's // and %)
        op, arg, c = dm[0], subst_lin(dm[1], mapping), dm[2]
        if arg.is_const():
            return const(arg.const // c if op == "div" else arg.const % c)
        return Lin.of_z3(arg.z3() / c if op == "div" else arg.z3() % c)
    e = atom(k)
    if z3.is_mul(e):  # a product: each factor through its Lin (fold_divmod applies), then `mul`
        out = const(1)
        for f in e.children():
            out = mul(out, subst_lin(_lin_of_z3(f), mapping))
        return out
    return Lin.of_z3(z3.substitute(e, *[(atom(v), m.z3()) for v, m in rel]))


_SUBST: dict = {}
_DIVMOD: dict[int, tuple | None] = {}


def _divmod_atom(k: int) -> tuple | None:
    """``(op, argument Lin, divisor)`` when atom ``k`` is ``a div c`` or ``a mod c`` for a
    constant ``c > 0``, else None."""
    if k not in _DIVMOD:
        e, hit = atom(k), None
        kind = e.decl().kind() if z3.is_app(e) else None
        if kind in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD) and z3.is_int_value(e.arg(1)):
            c = e.arg(1).as_long()
            if c > 0:
                hit = ("div" if kind == z3.Z3_OP_IDIV else "mod", _lin_of_z3(e.arg(0)), c)
        _DIVMOD[k] = hit
    return _DIVMOD[k]


def fold_divmod(x: Lin) -> Lin:
    """``x`` with each ``q*c*(a div c) + q*(b mod c)`` replaced by ``q*a`` where ``a - b`` is a
    multiple of ``c`` (Z3's integers: ``a = c*(a div c) + a mod c`` and equal residues have
    equal ``mod``): the program id and lane a writer's store was inverted into (mixed-radix
    digits, `symbolic.memory.witness`) recombined into the index they came from. An equal Lin."""
    atoms = {k: _divmod_atom(k) for k, _ in x.terms}
    divs = [(k, a) for k, a in atoms.items() if a is not None and a[0] == "div"]
    mods = [(k, a) for k, a in atoms.items() if a is not None and a[0] == "mod"]
    if not divs or not mods:
        return x
    coef = dict(x.terms)
    for kd, (_, a, c) in divs:
        for km, (_, b, cm) in mods:
            q = coef.get(km, 0)
            if cm != c or q == 0 or coef.get(kd, 0) != q * c:
                continue
            d = a.add(b, -1)
            if d.const % c == 0 and all(v % c == 0 for _, v in d.terms):
                return fold_divmod(x.add(Lin({kd: q * c, km: q}), -1).add(a.scale(q)))
    return x


# --- conditions --------------------------------------------------------------------------

_FOLD = {
    "<": lambda v: v < 0,
    "<=": lambda v: v <= 0,
    ">": lambda v: v > 0,
    ">=": lambda v: v >= 0,
    "==": lambda v: v == 0,
    "!=": lambda v: v != 0,
}


def cmp(op: str, a: Lin, b: Lin):
    d = a.add(b, -1)
    if d.is_const():
        return _FOLD[op](d.const)
    return ("cmp", op, d)


def c_and(a, b):
    if a is False or b is False:
        return False
    if a is True:
        return b
    if b is True:
        return a
    if a == b:
        return a
    return ("and", a, b)


def c_or(a, b):
    if a is True or b is True:
        return True
    if a is False:
        return b
    if b is False:
        return a
    if a == b:
        return a
    return ("or", a, b)


def c_not(a):
    if isinstance(a, bool):
        return not a
    if a[0] == "not":
        return a[1]
    return ("not", a)


_CZ3: dict = {}


def cond_z3(c) -> z3.BoolRef:
    if c is True or c is False:
        return z3.BoolVal(c)
    hit = _CZ3.get(c)
    if hit is not None:
        return hit
    tag = c[0]
    if tag == "cmp":
        d = c[2].z3()
        op = c[1]
        r = {
            "<": d < 0, "<=": d <= 0, ">": d > 0, ">=": d >= 0, "==": d == 0, "!=": d != 0,
        }[op]  # fmt: skip
    elif tag == "and":
        r = z3.And(cond_z3(c[1]), cond_z3(c[2]))
    elif tag == "or":
        r = z3.Or(cond_z3(c[1]), cond_z3(c[2]))
    elif tag == "not":
        r = z3.Not(cond_z3(c[1]))
    elif tag == "z3":
        r = c[1]
    else:  # pragma: no cover
        raise ValueError(c)
    _CZ3[c] = r
    return r


def subst_cond(c, mapping: dict[int, Lin]):
    if isinstance(c, bool) or not mapping:
        return c
    tag = c[0]
    if tag == "cmp":
        d = subst_lin(c[2], mapping)
        return _FOLD[c[1]](d.const) if d.is_const() else ("cmp", c[1], d)
    if tag == "and":
        return c_and(subst_cond(c[1], mapping), subst_cond(c[2], mapping))
    if tag == "or":
        return c_or(subst_cond(c[1], mapping), subst_cond(c[2], mapping))
    if tag == "not":
        return c_not(subst_cond(c[1], mapping))
    if tag == "z3":
        pairs = [(atom(v), m.z3()) for v, m in mapping.items()]
        e = z3.simplify(z3.substitute(c[1], *pairs))
        if z3.is_true(e):
            return True
        if z3.is_false(e):
            return False
        return ("z3", e)
    raise ValueError(c)  # pragma: no cover


# --- float terms ---------------------------------------------------------------------------


class Term:
    """A hash-consed float value. ``op`` is the function symbol; ``args`` its operands
    (Terms, Lins, conditions, tuples of Terms or plain values); ``dtype`` the result type."""

    __slots__ = ("op", "args", "dtype", "id", "size")
    _table: dict = {}
    _next = 0

    def __new__(cls, op: str, args: tuple, dtype: str):
        key = (op, dtype, args)
        hit = cls._table.get(key)
        if hit is not None:
            return hit
        t = object.__new__(cls)
        t.op, t.args, t.dtype = op, args, dtype
        t.id = Term._next
        Term._next += 1
        t.size = 1
        cls._table[key] = t
        return t

    def __hash__(self):
        return self.id

    def __eq__(self, other):
        return self is other

    def __repr__(self):
        return describe(self)


def fconst(v: float, dtype: str) -> Term:
    """A float constant, hash-consed by value AND bit pattern: Python's ``-0.0 == 0.0`` would
    otherwise make the two zeros one term (whichever was built first). ``args[0]`` is the
    value; ``args[1]`` its IEEE-754 double bits (only part of the key)."""
    v = float(v)
    return Term("const", (v, struct.unpack("<q", struct.pack("<d", v))[0]), dtype)


def is_pos_zero(t: Term) -> bool:
    """``t`` is the constant +0.0 (not -0.0: constants are keyed by their bits, `fconst`)."""
    return t.op == "const" and t.args[0] == 0.0 and str(t.args[0]) == "0.0"


def read(array: str, idx: Lin, dtype: str) -> Term:
    return Term("read", (array, idx), dtype)


def ite(c, a: Term, b: Term) -> Term:
    if c is True:
        return a
    if c is False:
        return b
    if a is b:
        return a
    return Term("ite", (c, a, b), a.dtype)


def cast(x: Term, dtype: str) -> Term:
    if x.dtype == dtype:
        return x
    if x.op == "const":
        return fconst(x.args[0], dtype)
    return Term("cast", (x,), dtype)


def op(name: str, dtype: str, *args) -> Term:
    return Term(name, tuple(args), dtype)


def subst_term(t: Term, mapping: dict[int, Lin], memo: dict | None = None) -> Term:
    """Replace integer atoms inside a term (read indices, ite conditions)."""
    if not mapping:
        return t
    if memo is None:
        memo = {}
    stack = [t]
    while stack:
        cur = stack[-1]
        if cur.id in memo:
            stack.pop()
            continue
        pending = [a for a in _children(cur) if a.id not in memo]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        memo[cur.id] = _rebuild(cur, mapping, memo)
    return memo[t.id]


def _children(t: Term) -> list[Term]:
    out = []
    for a in t.args:
        if isinstance(a, Term):
            out.append(a)
        elif isinstance(a, tuple) and a and isinstance(a[0], Term):
            out.extend(a)
    return out


def _rebuild(t: Term, mapping, memo) -> Term:
    if t.op == "read":
        return Term("read", (t.args[0], subst_lin(t.args[1], mapping)), t.dtype)
    if t.op == "ite":
        return ite(subst_cond(t.args[0], mapping), memo[t.args[1].id], memo[t.args[2].id])
    new = []
    for a in t.args:
        if isinstance(a, Lin):
            new.append(subst_lin(a, mapping))
        elif isinstance(a, Term):
            new.append(memo[a.id])
        elif isinstance(a, tuple) and a and isinstance(a[0], Term):
            new.append(tuple(memo[x.id] for x in a))
        else:
            new.append(a)
    return Term(t.op, tuple(new), t.dtype)


def free_atoms(t: Term) -> set[int]:
    seen: set[int] = set()
    out: set[int] = set()
    stack = [t]
    while stack:
        cur = stack.pop()
        if cur.id in seen:
            continue
        seen.add(cur.id)
        if cur.op == "read":
            out.update(_lin_vars(cur.args[1]))
        elif cur.op == "ite":
            out.update(_cond_vars(cur.args[0]))
        for a in cur.args:
            if isinstance(a, Lin):
                out.update(_lin_vars(a))
        stack.extend(_children(cur))
    return out


_ATOM_VARS: dict[int, frozenset] = {}


def _atom_vars(k: int) -> frozenset:
    hit = _ATOM_VARS.get(k)
    if hit is None:
        e = atom(k)
        hit = frozenset([k]) if e.num_args() == 0 else frozenset(atom_key(v) for v in z3_vars(e))
        _ATOM_VARS[k] = hit
    return hit


def _lin_vars(x: Lin) -> set[int]:
    out = set()
    for k, _ in x.terms:
        out |= _atom_vars(k)
    return out


def _cond_vars(c) -> set[int]:
    if isinstance(c, bool):
        return set()
    if c[0] == "cmp":
        return _lin_vars(c[2])
    if c[0] == "z3":
        return {atom_key(v) for v in z3_vars(c[1])}
    out = set()
    for x in c[1:]:
        out |= _cond_vars(x)
    return out


def z3_vars(e) -> list:
    out, seen, stack = [], set(), [e]
    while stack:
        x = stack.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_const(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            out.append(x)
        else:
            stack.extend(x.children())
    return out


def describe(t: Term, depth: int = 2) -> str:
    if t.op == "const":
        return f"{t.args[0]!r}:{t.dtype}"
    if t.op == "read":
        return f"{t.args[0]}[{t.args[1]}]:{t.dtype}"
    if t.op == "arg":
        return f"arg {t.args[0]}"
    if depth <= 0:
        return f"{t.op}(...)"
    if t.op == "dot16":
        n = 1
        cur = t.args[0]
        while isinstance(cur, Term) and cur.op == "dot16":
            n += 1
            cur = cur.args[0]
        return f"dot16-chain[{n} atoms, last k-atom a0={describe(t.args[1][0], depth - 1)}]"
    if t.op == "dotk":
        return f"dot[K={t.args[1]}, generic k lane: a={describe(t.args[2], depth - 1)}]"
    if t.op == "ite":
        return (
            f"ite({t.args[0]}, {describe(t.args[1], depth - 1)}, {describe(t.args[2], depth - 1)})"
        )
    parts = []
    for a in t.args:
        if isinstance(a, Term):
            parts.append(describe(a, depth - 1))
        elif isinstance(a, tuple) and a and isinstance(a[0], Term):
            parts.append(f"<{len(a)} terms>")
        else:
            parts.append(repr(a))
    return f"{t.op}:{t.dtype}(" + ", ".join(parts) + ")"
