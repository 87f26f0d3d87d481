"""Memory of a launch: the stores and loads the programs make, and what a read sees.

Concern: the records of each ``tl.store`` / ``tl.load`` (with the path, program ids and lane
ranges under which they happen), which (program, lane) of a store writes an element
(:func:`witness`, :func:`_active`), and the value a read returns (:func:`read`): an
intermediate written by an earlier kernel call resolves to its writer's value (the latest
call that wrote it, stream order), an input goes through the goal's relation between the
executions. Invariants: a read no earlier call may have written is an input read; a read
that may hit an element no program wrote is rejected, never defaulted.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.solving import staged
from samebits.analysis.kernel_prover.symbolic.values import FLOAT_RANK, Unsupported
from samebits.analysis.kernel_prover.terms import Lin, Term


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


def witness(st: Store, target: Lin, flat: bool = False) -> dict | None:
    """Program ids and lanes of the store that writes ``target``, as mixed-radix digits of
    ``target`` (``None`` when the store's offset is not of that form). ``flat``: a read's
    index, whose part outside the symbolic-width products may exceed the width
    (`radix_witness`)."""
    wv = set(st.wvars)
    coefs, rest = [], T.const(st.offset.const)
    for k, c in st.offset.terms:
        if k in wv:
            coefs.append((c, k))
        else:
            e = T.atom(k)
            if e.num_args() and any(T.atom_key(v) in wv for v in T.z3_vars(e)):
                return radix_witness(st, target, flat)  # X * W + B, W a symbolic shape int
            rest = rest.add(Lin(((k, c),), 0))
    if {k for _, k in coefs} != wv or any(c <= 0 for c, _ in coefs):
        return None
    return _radix_digits(coefs, target.add(rest, -1))


def _radix_digits(coefs: list, r: Lin) -> dict | None:
    """Mixed-radix digits of ``r`` for the (coefficient, write variable) pairs ``coefs``."""
    coefs.sort(reverse=True)
    if len({c for c, _ in coefs}) != len(coefs):
        return None
    sub = {}
    for c, k in coefs:
        sub[k] = T.floordiv(r, T.const(c))
        r = T.mod(r, T.const(c))
    return sub


SHAPE_PREFIX = "shape."  # Z3 names of the symbolic shape integers (a row width, N of a linear)


def _shape_product(e) -> tuple | None:
    """``(W, X)`` when ``e`` is a product ``X * W`` with ``W`` a shape symbol, else None."""
    if not (z3.is_app(e) and e.decl().kind() == z3.Z3_OP_MUL):
        return None
    args = list(e.children())
    shapes = [a for a in args if z3.is_const(a) and str(a).startswith(SHAPE_PREFIX)]
    if len(shapes) != 1:
        return None
    rest = [a for a in args if not a.eq(shapes[0])]
    x = rest[0] if len(rest) == 1 else z3.Product(*rest)
    return shapes[0], Lin.of_z3(x)


@dataclass
class _Digits:
    """Part of a store offset (the row or the column digits) for :func:`witness`."""

    offset: Lin
    wvars: tuple


def radix_witness(st: Store, target: Lin, flat: bool = False) -> dict | None:
    """The writer of ``target`` when the store's offset is ``c * X * W + B`` with ``W`` a
    symbolic shape integer (a row-major index over rows of a symbolic width ``c * W``, e.g.
    ``head_dim * HEADS``): ``target`` is read as ``R * c * W + C`` with ``R`` the sum of its
    products with ``W`` divided by ``c`` (``sum c_j / c X_j``) and ``C`` the
    rest, or with ``flat`` (an index such as the ordered sum's ``i``) ``R + C div W`` and
    ``C mod W``; the digits of ``X`` come from ``R``, those of ``B`` from ``C`` (mixed-radix
    indices, `witness`). The caller checks the result (`_active`: the store is active there
    and its offset equals ``target``), so a wrong split is a failed check, never a wrong proof."""
    wv = set(st.wvars)
    hi = [(k, c, _shape_product(T.atom(k))) for k, c in st.offset.terms]
    hi = [(k, c, sp) for k, c, sp in hi if sp is not None and _holds_any(sp[1], wv)]
    if len(hi) != 1 or hi[0][1] < 1:
        return None
    k_hi, ch, (w, x) = hi[0]  # the offset's row term ch * X * W: rows ch * W wide
    low = st.offset.add(Lin(((k_hi, ch),), 0), -1)
    r, col = T.ZERO, target
    for k, c in target.terms:
        sp = _shape_product(T.atom(k))
        if sp is not None and sp[0].eq(w):
            if c % ch:
                return None
            r, col = r.add(sp[1].scale(c // ch)), col.add(Lin(((k, c),), 0), -1)
    if flat:
        wl = Lin.var(w).scale(ch)
        r, col = r.add(T.floordiv(col, wl)), T.mod(col, wl)
    xv = tuple(k for k, _ in x.terms if k in wv)
    lv = tuple(k for k in st.wvars if k not in xv)
    sub_x = witness(_Digits(x, xv), r) if xv else ({} if x == r else None)
    sub_l = witness(_Digits(low, lv), col) if lv else {}
    if sub_x is None or sub_l is None:
        return None
    return {**sub_x, **sub_l}


def _holds_any(x: Lin, wv: set) -> bool:
    return any(k in wv for k, _ in x.terms)


def match_witness(st: Store, target: Lin) -> dict | None:
    """Program ids and lanes of the store that writes ``target`` when its offset is not a
    mixed-radix index (`witness`): the offset's terms that hold a write variable inside an
    opaque atom (``imul(pid, n)``, ``lane mod G``) are matched with the target's terms of the
    same coefficient and shape (the write variables as holes), the plain write variables then
    take the target's remaining terms of their coefficient. ``None`` when no such match; the
    caller checks the result (the store is active there and writes ``target``)."""
    wv = set(st.wvars)
    rest = dict(target.terms)
    sub: dict = {}
    plain = []
    for k, c in st.offset.terms:
        if k in wv:
            plain.append((k, c))
            continue
        e = T.atom(k)
        if not any(T.atom_key(v) in wv for v in T.z3_vars(e)):
            if rest.get(k) != c:
                return None
            del rest[k]
            continue
        hit = None
        for k2, c2 in list(rest.items()):
            if c2 != c:
                continue
            bind = dict(sub)
            if _zmatch(e, T.atom(k2), wv, bind):
                hit = (k2, bind)
                break
        if hit is None:
            return None
        del rest[hit[0]]
        sub = hit[1]
    sub = {k: (v if isinstance(v, Lin) else Lin.of_z3(v)) for k, v in sub.items()}
    resid = Lin(rest, target.const - st.offset.const)
    for k, c in plain:
        if k in sub:  # also bound inside an atom: its plain term takes that value
            resid = resid.add(sub[k].scale(c), -1)
    free = sorted(((c, k) for k, c in plain if k not in sub), reverse=True)
    if any(c <= 0 for c, _ in free) or len({c for c, _ in free}) != len(free):
        return None
    # greedy: each plain variable takes the remaining terms its coefficient divides (largest
    # coefficient first); else the mixed-radix digits of what is left (as `witness`)
    greedy, r = {}, dict(resid.terms)
    for c, k in free:
        mine = {a: b for a, b in r.items() if b % c == 0}
        greedy[k] = Lin(tuple(sorted((a, b // c) for a, b in mine.items())), 0)
        for a in mine:
            del r[a]
    if not r and resid.const == 0:
        sub.update(greedy)
        return sub
    for c, k in free:
        sub[k] = T.floordiv(resid, T.const(c))
        resid = T.mod(resid, T.const(c))
    return sub


def _zmatch(pat, term, holes: set, bind: dict) -> bool:
    """``pat`` equals ``term`` with the variables ``holes`` (atom keys) bound in ``bind``."""
    if z3.is_const(pat) and T.atom_key(pat) in holes:
        k = T.atom_key(pat)
        if k in bind:
            b = bind[k]
            return (b.z3() if isinstance(b, Lin) else b).eq(term)
        bind[k] = term
        return True
    if pat.eq(term):
        return True
    if not (z3.is_app(pat) and z3.is_app(term)):
        return False
    if pat.num_args() != term.num_args():
        return _zmatch_sum(pat, term, holes, bind)
    if pat.num_args() == 0 or not pat.decl().eq(term.decl()):
        return False
    orders = [term.children()]
    if pat.decl().kind() in (z3.Z3_OP_ADD, z3.Z3_OP_MUL) and pat.num_args() <= 4:
        # a sum / product's operands in any order (Z3 orders them by AST creation, which
        # differs between executions built in another order)
        orders = [list(p) for p in itertools.permutations(term.children())]
    for kids in orders:
        trial = dict(bind)
        if all(_zmatch(a, b, holes, trial) for a, b in zip(pat.children(), kids, strict=True)):
            bind.update(trial)
            return True
    return False


def _zmatch_sum(pat, term, holes: set, bind: dict) -> bool:
    """A sum with one unbound hole against a sum of more operands (a span index ``4 * j + u``
    where the store wrote index ``s``): the pattern's other operands match operands of the
    term, the hole takes the sum of the rest. A candidate only: the caller checks that the
    store writes the element under it (`_resolve`)."""
    if not (pat.decl().kind() == z3.Z3_OP_ADD and term.decl().kind() == z3.Z3_OP_ADD):
        return False
    kids, tk = pat.children(), term.children()
    free = [a for a in kids if z3.is_const(a) and T.atom_key(a) in holes
            and T.atom_key(a) not in bind]  # fmt: skip
    if len(free) != 1 or not len(kids) < len(tk) <= 6:
        return False
    others = [a for a in kids if not a.eq(free[0])]
    for chosen in itertools.permutations(range(len(tk)), len(others)):
        trial = dict(bind)
        if all(_zmatch(a, tk[i], holes, trial) for a, i in zip(others, chosen, strict=True)):
            rest = [tk[i] for i in range(len(tk)) if i not in chosen]
            trial[T.atom_key(free[0])] = rest[0] if len(rest) == 1 else z3.Sum(rest)
            bind.update(trial)
            return True
    return False


def read(self, array: str, idx: Lin, mask, dtype: str, node):
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


# the stages of the store resolution's questions (`solving.staged`): most of its flat-index
# questions (div / mod by constants, products of shape symbols) fall to the older arithmetic
# (the split-grid partials of a tiny down projection: 33 s -> 13 s, 2026-12-07)
ARITH_TRIES = ((2, 1000), (None, 2000), (2, 10000), (None, 20000))


def _check(facts: list):
    """``sat`` / ``unsat`` / ``unknown`` of ``facts`` (`solving.staged` over ARITH_TRIES)."""
    return staged(facts, ARITH_TRIES)


def _read_witness(st: Store, idx: Lin, ambient: list) -> dict | None:
    """The writer of a read's index: the plain witness where the ambient facts show it writes
    there (also a row-structured index over a symbolic width, ``R * W + C``); else the flat
    split of a symbolic-width index (``R + C div W``, ``C mod W``, `radix_witness`)."""
    sub = witness(st, idx)
    flat = witness(st, idx, flat=True)
    if sub == flat or flat is None:
        return sub
    if sub is not None and _check([*ambient, z3.Not(z3.And(_active(st, sub, idx)))]) == z3.unsat:
        return sub
    return flat


def _pin_unbound(st: Store, sub: dict, target: Lin, ambient: list) -> dict:
    """``sub`` with each write variable the offset does not name (a lane whose term vanished
    from the offset, e.g. ``r % GROUP`` at GROUP 1) bound to the one value the store's active
    condition allows it, when Z3 proves that value unique; else left free (the caller's
    coverage check then fails: a refusal, never a wrong proof)."""
    for k in st.wvars:
        if k in sub:
            continue
        x = Lin(((k, 1),), 0).z3()
        s = z3.Solver()
        s.set("timeout", 20000)
        s.add(*ambient, *_active(st, sub, target))
        if s.check() != z3.sat:
            continue
        val = s.model().eval(x, model_completion=True)
        s.add(x != val)
        if s.check() == z3.unsat:
            sub = {**sub, k: T.const(val.as_long())}
    return sub


def _resolve(self, groups: list, array: str, idx: Lin, ambient: list, node):
    """The value of ``array[idx]`` written by the stores of ``groups`` (one list per kernel
    call, latest first): the writer of the latest call that wrote it; where that call may not
    have written it, the earlier calls' value (a select)."""
    group, rest = groups[0], groups[1:]
    cands = []
    for st in group:
        sub = _read_witness(st, idx, ambient)
        if sub is None:
            sub = match_witness(st, idx)
        if sub is None:
            raise Unsupported(self.where(node), f"cannot invert the store to {array} at {st.where}")
        sub = _pin_unbound(st, sub, idx, ambient)
        f = z3.And(_active(st, sub, idx))
        if _check([*ambient, f]) == z3.unsat:
            continue
        val = st.value
        val = T.subst_term(val, sub) if isinstance(val, Term) else T.subst_lin(val, sub)
        if _check([*ambient, z3.Not(f)]) == z3.unsat:
            return val
        cands.append((f, val))
    covered = z3.Or([f for f, _ in cands] or [z3.BoolVal(False)])
    if _check([*ambient, z3.Not(covered)]) != z3.unsat:
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
