"""Data-dependent integers ("words") and data-dependent predicates ("preds").

Concern: the values a kernel computes FROM float data that are not floats: an integer made by
a float -> int conversion or a bit cast (a software exp's exponent field), integer arithmetic
and shifts on such integers, comparisons of floats (``x != x``) and selects on them. The
index arithmetic of ``terms.Lin`` (exact integers, decided by Z3) never holds such a value:
a word or a pred is a hash-consed :class:`~samebits.analysis.kernel_prover.terms.Term`, i.e.
an uninterpreted function symbol of its operands, like every float operation. Two of them are
equal only when they are the same operation (same name, same dtype, same parameters) on equal
operands; nothing else is assumed (no ``(a + b) - b = a``, no ``x != x <=> isnan``, no
``bitcast(bitcast(x)) = x``), so a proof holds for any deterministic implementation of the
operations.

Invariants: a word never enters an index, a mask, a loop bound or an ``if`` (rejected:
`Unsupported`); an index integer (Lin) used as a word operand is embedded as the term
``int(lin)``, whose two executions' values are compared exactly (Z3, under the facts); a
pred combines only with preds (``&``, ``|``, ``^``, ``~``); a bit cast between types of
different widths is rejected.
"""

from __future__ import annotations

import ast

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.symbolic.values import FLOAT_RANK, Tile, Unsupported
from samebits.analysis.kernel_prover.terms import Term

WORD = "word"  # Tile.kind of a data-dependent integer (v: a Term of an integer dtype)
PRED = "pred"  # Tile.kind of a data-dependent predicate (v: a Term of dtype i1)
BITS = {"fp64": 64, "i64": 64, "fp32": 32, "i32": 32, "fp16": 16, "bf16": 16, "i16": 16,
        "i8": 8, "i1": 1}  # fmt: skip

_INT_OPS = {
    ast.Add: "iadd", ast.Sub: "isub", ast.Mult: "imul", ast.FloorDiv: "ifloordiv",
    ast.Mod: "imod", ast.BitAnd: "iand", ast.BitOr: "ior", ast.BitXor: "ixor",
    ast.LShift: "shl", ast.RShift: "shr",
}  # fmt: skip
_PRED_OPS = {ast.BitAnd: "pand", ast.BitOr: "por", ast.BitXor: "pxor"}
_CMP = {ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.Eq: "==", ast.NotEq: "!="}


def involved(*tiles) -> bool:
    """Some operand is a word or a pred (the operation is this module's)."""
    return any(isinstance(t, Tile) and t.kind in (WORD, PRED) for t in tiles)


def int_dtype(*tiles: Tile) -> str:
    """The integer result type: i64 when an operand is i64, else the word's (or i32)."""
    dts = [t.dtype for t in tiles if t.kind in ("int", WORD)]
    if "i64" in dts:
        return "i64"
    words = [t.dtype for t in tiles if t.kind == WORD]
    return words[0] if words else "i32"


def as_word(t: Tile, v, dtype: str, where: str) -> Term:
    """An integer operand as a word term of ``dtype``: a word (converted when its dtype
    differs), or an index integer embedded exactly (``int(lin)``)."""
    if t.kind == WORD:
        return v if v.dtype == dtype else Term("cvt.int", (v,), dtype)
    if t.kind == "int":
        return Term("int", (v,), dtype)
    raise Unsupported(where, f"a {t.kind} used as a data-dependent integer")


def word_to_float(v: Term, dtype: str) -> Term:
    """A word converted to a float type (``cvt`` round to nearest: its own symbol)."""
    return Term("cvt.itof", (v,), dtype)


def binop(op, dims, a: Tile, b: Tile, va, vb, where: str) -> Tile:
    """``a op b`` where an operand is a word or pred and none is a float (the interpreter
    promotes a word meeting a float to that float first)."""
    if a.kind == PRED and b.kind == PRED:
        name = _PRED_OPS.get(type(op))
        if name is None:
            raise Unsupported(where, f"operator {type(op).__name__} on predicates")
        return Tile(PRED, dims, Term(name, (va, vb), "i1"), "i1")
    if PRED in (a.kind, b.kind):
        raise Unsupported(where, "a data-dependent predicate combined with a non-predicate "
                          "(e.g. an index mask): not modelled")  # fmt: skip
    name = _INT_OPS.get(type(op))
    if name is None:
        raise Unsupported(where, f"operator {type(op).__name__} on data-dependent integers")
    dt = int_dtype(a, b)
    x, y = as_word(a, va, dt, where), as_word(b, vb, dt, where)
    return Tile(WORD, dims, Term(name, (x, y), dt), dt)


def compare(op, dims, a: Tile, b: Tile, va, vb, where: str, as_float) -> Tile:
    """A comparison with a float or word operand: a pred ``fcmp(op, x, y)`` (floats, after
    promotion to the wider float) or ``icmp(op, x, y)`` (integers)."""
    sym = _CMP[type(op)]
    if "float" in (a.kind, b.kind):
        dt = max([t.dtype for t in (a, b) if t.kind == "float"], key=lambda d: FLOAT_RANK[d])
        x, y = as_float(a, va, dt), as_float(b, vb, dt)
        return Tile(PRED, dims, Term("fcmp", (sym, x, y), "i1"), "i1")
    dt = int_dtype(a, b)
    x, y = as_word(a, va, dt, where), as_word(b, vb, dt, where)
    return Tile(PRED, dims, Term("icmp", (sym, x, y), "i1"), "i1")


def unary(op, t: Tile, where: str) -> Tile:
    """``-w``, ``~w`` on a word; ``~p`` on a pred."""
    if t.kind == WORD and isinstance(op, ast.USub):
        return Tile(WORD, t.dims, Term("ineg", (t.v,), t.dtype), t.dtype)
    if t.kind == WORD and isinstance(op, ast.Invert):
        return Tile(WORD, t.dims, Term("inot", (t.v,), t.dtype), t.dtype)
    if t.kind == PRED and isinstance(op, ast.Invert):
        return Tile(PRED, t.dims, Term("pnot", (t.v,), "i1"), "i1")
    raise Unsupported(where, f"unary {type(op).__name__} on a {t.kind}")


def select(dims, c: Tile, a: Tile, b: Tile, vc, va, vb, where: str, as_float) -> Tile:
    """``tl.where(c, a, b)`` with a pred condition or a word operand. A pred condition gives
    ``select(c, a, b)`` (never decided: data-dependent); an index condition selecting words
    gives the prover's ``ite`` (decided by Z3 like every index select)."""
    if c.kind not in (PRED, "bool"):
        raise Unsupported(where, "tl.where condition must be boolean")
    if "float" in (a.kind, b.kind):
        dt = max([t.dtype for t in (a, b) if t.kind == "float"], key=lambda d: FLOAT_RANK[d])
        x, y, kind = as_float(a, va, dt), as_float(b, vb, dt), "float"
    elif a.kind == PRED and b.kind == PRED:
        dt, x, y, kind = "i1", va, vb, PRED
    elif {a.kind, b.kind} <= {"int", WORD}:
        dt = int_dtype(a, b)
        x, y, kind = as_word(a, va, dt, where), as_word(b, vb, dt, where), WORD
    else:
        raise Unsupported(where, "tl.where operands")
    if c.kind == "bool":
        return Tile(kind, dims, T.ite(vc, x, y), dt)
    return Tile(kind, dims, Term("select", (vc, x, y), dt), dt)


def minmax(name: str, dims, a: Tile, b: Tile, va, vb, where: str) -> Tile:
    """``tl.minimum`` / ``tl.maximum`` with a word operand (integers: ``imin`` / ``imax``)."""
    if not {a.kind, b.kind} <= {"int", WORD}:
        raise Unsupported(where, f"tl.{name}imum of a word and a {a.kind}/{b.kind}")
    dt = int_dtype(a, b)
    x, y = as_word(a, va, dt, where), as_word(b, vb, dt, where)
    return Tile(WORD, dims, Term(f"i{name}", (x, y), dt), dt)


def bitcast(t: Tile, dt: str, where: str) -> Tile:
    """``x.to(dt, bitcast=True)``: the same bits read as ``dt`` (its own symbol; equal widths
    only). An index integer is embedded first; a cast to the operand's own type is itself."""
    if t.kind not in ("float", "int", WORD):
        raise Unsupported(where, f"bitcast of a {t.kind}")
    if BITS.get(t.dtype) != BITS.get(dt) or dt not in BITS:
        raise Unsupported(where, f"bitcast {t.dtype} -> {dt}: widths differ")
    if t.dtype == dt:
        return t
    v = as_word(t, t.v, t.dtype, where) if t.kind == "int" else t.v
    kind = "float" if dt in FLOAT_RANK else WORD
    return Tile(kind, t.dims, Term("bitcast", (v,), dt), dt)


def convert(t: Tile, dt: str, where: str) -> Tile:
    """``x.to(dt)`` (a value conversion) where a word results or is converted: float -> int
    (``cvt.ftoi``: the conversion of the dtype, Triton's round toward zero), word -> float
    (``cvt.itof``), word -> another integer type (``cvt.int``)."""
    if t.kind == "float" and dt not in FLOAT_RANK:
        if dt == "i1":
            raise Unsupported(where, "float -> int1 cast")
        return Tile(WORD, t.dims, Term("cvt.ftoi", (t.v,), dt), dt)
    if t.kind == WORD:
        if dt in FLOAT_RANK:
            return Tile("float", t.dims, word_to_float(t.v, dt), dt)
        if dt == "i1":
            raise Unsupported(where, "word -> int1 cast")
        return t if dt == t.dtype else Tile(WORD, t.dims, Term("cvt.int", (t.v,), dt), dt)
    raise Unsupported(where, f".to of a {t.kind}")
