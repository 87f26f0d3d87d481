"""int32 range obligations of the attention kernels (issue 28: index arithmetic at the
deployment's bounds).

Every int32 ``+ - *`` of both executions whose result is not a constant (recorded by the
interpreter, `Execution.int32`) is proved inside [-2^31, 2^31) under the facts where it runs
and the *deployment bounds* (`units.ATTENTION_BOUNDS`): positions below ``POS_MAX`` (the
largest ``max_model_len`` a certificate covers), block-table entries below ``BLOCKS_MAX``
(``num_kv_blocks``), at most ``M_MAX`` query tokens per launch and programs, a block-table
row of at most ``POS_MAX // PAGE + 1`` pages, a window in 1..``FULL_WINDOW``, and for the
split-KV launch the host's own rule (`attention.decode_splits`: a split launch has
``requests * kv_heads < DECODE_SPLIT_PROGRAMS``, ``max_spans = max_position // SPAN + 1``).
The bounds are stated for every value the metadata arrays can hold (each read of
``pos`` / ``row0`` / ``qend`` / ``req`` / ``bt`` is an uninterpreted application; each one in
an obligation gets its array's range). The gate checks the deployment against them
(`gate.check_attention_bounds`).
"""

from __future__ import annotations

import z3

from samebits.analysis.kernel_prover.solving import check
from samebits.analysis.kernel_prover.symbolic.values import Unsupported

INT32 = (-(1 << 31), (1 << 31) - 1)


def _apps(e, seen: set, out: list) -> None:
    stack = [e]
    while stack:
        x = stack.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_app(x) and x.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            out.append(x)
        stack.extend(x.children())


def _range(x, name: str, b: dict, page: int, span: int, kv_heads) -> list:
    """The stated range of one metadata value or launch integer (empty: none needed)."""
    v = x
    for suffix, lo, hi in (
        ("pos", -1, b["POS_MAX"] - 1),  # -1: the masked lanes' other=-1
        ("row0", 0, b["M_MAX"]),
        ("qend", 0, b["M_MAX"]),
        ("req", 0, b["M_MAX"] - 1),
        ("bt", 0, b["BLOCKS_MAX"] - 1),
    ):
        if name.startswith(f"mem.{suffix}@"):
            return [v >= lo, v <= hi]
    tail = name.split(".", 1)[-1]
    spans = b["POS_MAX"] // span + 1
    if name == "shape.KV":  # a head class: kv_heads is its (lo, hi)
        return [v >= kv_heads[0], v <= kv_heads[1]]
    kv_min = kv_heads[0] if isinstance(kv_heads, tuple) else kv_heads
    limits = {
        "bt_stride": (1, b["POS_MAX"] // page + 1),
        "max_spans": (1, spans),
        "programs": (1, b["M_MAX"]),
        "requests": (1, max(1, (b["SPLIT_PROGRAMS"] - 1) // kv_min)),
        "splits": (1, spans),
    }
    if name == "window":
        return [v >= 1, v <= b["FULL_WINDOW"]]
    if tail in limits:
        lo, hi = limits[tail]
        return [v >= lo, v <= hi]
    if tail.startswith("maxred"):  # the largest position of a program's rows
        return [v >= -1, v <= b["POS_MAX"] - 1]
    return []


def bounds_for(exprs: list, b: dict, page: int, span: int, kv_heads) -> list:
    """The stated ranges of every metadata application and launch integer in ``exprs``."""
    apps: list = []
    seen: set = set()
    for e in exprs:
        _apps(e, seen, apps)
    out = []
    for x in apps:
        out += _range(x, x.decl().name(), b, page, span, kv_heads)
    return out


def _products(e):
    """``e`` with the prover's opaque integer products (``imul``, `tl_semantics.opaque_mul`)
    as the products they stand for: an overflow question needs their values."""
    imul = z3.Function("imul", z3.IntSort(), z3.IntSort(), z3.IntSort())
    return z3.substitute_funs(e, (imul, z3.Var(0, z3.IntSort()) * z3.Var(1, z3.IntSort())))


def check_int32(ex, b: dict, page: int, span: int, kv_heads, side: str, refuted) -> int:
    """Every recorded int32 operation of ``ex`` stays in range under the bounds ``b``; the
    number of distinct obligations. ``kv_heads``: the count, or a head class's (lo, hi);
    ``refuted``: the prover's Refuted (a counterexample)."""
    done = set()
    for where, v, facts in ex.int32 or ():
        if (where, v) in done:
            continue
        done.add((where, v))
        s = z3.Solver()
        s.set("timeout", 60000)
        e, fs = _products(v.z3()), [_products(f) for f in facts]
        s.add(*fs, *bounds_for([e, *fs], b, page, span, kv_heads))
        s.add(z3.Or(e < INT32[0], e > INT32[1]))
        res = check(s)
        if res == z3.sat:
            raise refuted({"reason": f"int32 overflow in the {side} execution at {where}: {v} "
                           "can leave the int32 range within the deployment bounds",
                           "model": {str(d): str(s.model()[d]) for d in s.model().decls()[:40]}})  # fmt: skip
        if res != z3.unsat:
            raise Unsupported(where, f"int32 range of {v}: solver {res}")
    return len(done)
