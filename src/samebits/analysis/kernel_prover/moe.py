"""The grouped MoE expert kernel's goal: each row it writes has the bits of the certified
split-plan linear of the row's expert on the row alone (`kernels/triton/_moe_kernels.py`).

Left: `moe_grouped_kernel` over a symbolic number of tiles T (any P, any routing): the tile
table (expert, lo, hi per tile), the row maps x_rows / y_rows and the weights are free. For
each store of y it writes, the prover finds the sorted row I it writes (the store offset is
``y_rows[I] * N + c``, checked) and shows, under the store's facts:

- I lies in the rows ``[tile_lo[t], tile_hi[t])`` of the program's own tile t, and
  ``0 <= c < N``;
- the value equals that of the right execution: the linear's M = 1 launch
  (`linear.choose_launch(plan, 1)`, `_linear_kernels.py`) on input row ``x_rows[I]`` of x and
  on expert ``tile_expert[t]``'s weight ``w[e]`` (its reads of x row 0 and of the [N, K]
  weight are read at those places, anything else is memory the left cannot see), at column c;
- no two (program, lane)s write one element of y, under the instances of assumption
  `tile-table` (distinct rows of the sorted order have distinct y_rows; rows of two tiles
  differ).

The linear unit proves that M = 1 launch equal to every launch of the plan at any M, and
batch invariant: so a row's bits are the per-expert linear's whatever the number of rows
routed to the expert, the tile config (BLOCK_M, BLOCK_N, warps) or the other rows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.prover import (
    Goal,
    Refuted,
    Result,
    _compare,
    _coverage,
    _last_writes,
    _model_dict,
    _unique,
)
from samebits.analysis.kernel_prover.solving import check
from samebits.analysis.kernel_prover.symbolic.execution import Execution
from samebits.analysis.kernel_prover.symbolic.memory import RaceError, _active
from samebits.analysis.kernel_prover.symbolic.oracle import Oracle
from samebits.analysis.kernel_prover.symbolic.values import Unsupported
from samebits.analysis.kernel_prover.terms import Lin

GROUPED = "grouped_row_equivalence"
ASSUMPTIONS = {
    "tile-table": "the host's tile table (`moe_grouped.tile_table`: one program of "
    "`_moe_table_kernel.py`, or for large P the torch ops of `tile_table_torch`, the same "
    "integers) gives "
    "every sorted row i < P exactly one tile t with tile_lo[t] <= i < tile_hi[t] <= "
    "tile_lo[t] + BLOCK_M, tile_expert[t] the expert of every row of the tile, other tiles "
    "lo >= hi; the stores' rows y_rows (the stable expert order, a permutation) are "
    "distinct for distinct sorted rows. Tested (tests/kernels/triton/test_triton_moe_grouped.py), not proved: the "
    "prover uses the instances 'distinct sorted rows have distinct y_rows' and 'rows of two "
    "tiles differ' for the stores it compares",
}


@dataclass
class GroupedSpec:
    """One specialization: the grouped launch (left) against the linear's M = 1 launch."""

    name: str
    kernel_file: str
    goal: Goal
    left: list
    right: list
    n: int
    k: int
    description: dict
    also_files: tuple = ("_linear_kernels.py",)


def _apps(e, name: str) -> list:
    """The applications ``mem.<name>(arg)`` inside the Z3 expression ``e``."""
    out, stack, seen = [], [e], set()
    while stack:
        x = stack.pop()
        if x.get_id() in seen:
            continue
        seen.add(x.get_id())
        if z3.is_app(x) and x.decl().name() == f"mem.{name}" and x.num_args() == 1:
            out.append(x)
        stack.extend(x.children())
    return out


def _mem(name: str, arg) -> z3.ArithRef:
    return z3.Function(f"mem.{name}", z3.IntSort(), z3.IntSort())(arg)


def _row_split(st, n: int) -> tuple[z3.ArithRef, Lin, Lin]:
    """The store's offset as ``a * N + col`` with ``a`` the one term holding a y_rows read:
    (the sorted row I that read is at, the term a, col)."""
    held = [(k, c) for k, c in st.offset.terms if _apps(T.atom(k), "y_rows")]
    apps = _apps(T.atom(held[0][0]), "y_rows") if len(held) == 1 else []
    if len(held) != 1 or held[0][1] != n or len({a.get_id() for a in apps}) != 1:
        raise Refuted({"reason": f"y: the store offset is not y_rows[row] * {n} + column: "
                                 f"{st.offset}", "store": st.where})  # fmt: skip
    term = Lin((held[0],), 0)
    return apps[0].arg(0), term, st.offset.add(term, -1)


def _check(facts: list, claim, reason: str, where: str) -> None:
    s = z3.Solver()
    s.set("timeout", 60000)
    s.add(*facts, z3.Not(claim))
    res = check(s)
    if res == z3.sat:
        raise Refuted({"reason": reason, "store": where,
                       "model": _model_dict(s.model(), ["L.", "R."])})  # fmt: skip
    if res != z3.unsat:
        raise Unsupported(where, f"{reason}: solver {res}")


def _in_range(ambient: list, idx: Lin, width: int) -> bool | None:
    """Whether ``0 <= idx < width`` always (True), never (False) or sometimes (None)."""
    inside = z3.And(idx.z3() >= 0, idx.z3() < width)
    o = Oracle(ambient)
    if o.valid(inside):
        return True
    return False if o.valid(z3.Not(inside)) else None


def _remap(row, expert, spec: GroupedSpec):
    """The right execution's reads: x row 0 -> row x_rows[I] of x, w [N, K] -> w[e]."""
    widths = {"x": spec.k, "w": spec.n * spec.k}
    bases = {"x": Lin.var(row).scale(spec.k), "w": Lin.var(expert).scale(spec.n * spec.k)}

    def remap(array, idx, ambient, where):
        if array not in widths:
            return array, idx
        inside = _in_range(ambient, idx, widths[array])
        if inside is None:
            raise Unsupported(where, f"cannot decide whether {array}[{idx}] stays in its row")
        return (array, bases[array].add(idx)) if inside else (f"{array}@outside", idx)

    return remap


def _injectivity(lins: list) -> list:
    """Instances of `tile-table` for the y_rows and tile reads in two store offsets."""
    rows = {}
    for x in lins:
        for k, _ in x.terms:
            for a in _apps(T.atom(k), "y_rows"):
                rows[a.get_id()] = a
    vals, out = list(rows.values()), []
    for i, ya in enumerate(vals):
        for yb in vals[i + 1 :]:
            a, b = ya.arg(0), yb.arg(0)
            out.append(z3.Implies(a != b, ya != yb))
            for ta in _apps(a, "tile_lo"):
                for tb in _apps(b, "tile_lo"):
                    t_a, t_b = ta.arg(0), tb.arg(0)
                    both = z3.And(a >= ta, a < _mem("tile_hi", t_a), b >= tb,
                                  b < _mem("tile_hi", t_b), t_a != t_b)  # fmt: skip
                    out.append(z3.Implies(both, a != b))
    return out


def prove_grouped(src, spec: GroupedSpec) -> Result:
    t0 = time.perf_counter()
    stats: dict = {}
    try:
        _prove(src, spec, stats)
    except Unsupported as u:
        return Result(False, spec.goal, time.perf_counter() - t0, stats, unsupported=str(u))
    except Refuted as r:
        return Result(False, spec.goal, time.perf_counter() - t0, stats, counterexample=r.cex)
    except RaceError as r:
        return Result(False, spec.goal, time.perf_counter() - t0, stats,
                      counterexample={"reason": str(r)})  # fmt: skip
    return Result(True, spec.goal, time.perf_counter() - t0, stats)


def _prove(src, spec: GroupedSpec, stats: dict) -> None:
    pids: list = []
    left = Execution("L", src, spec.left)
    left.call_hook = lambda ci, call, pid_vars: pids.append(pid_vars)
    left.run()
    tile = pids[0][0]
    if tile is None:
        raise Unsupported("goal", "the tile axis of the grouped launch must be symbolic")
    others = sorted({st.array for st in left.stores} - {"y"})
    if others:
        raise Refuted({"reason": f"the grouped launch also stores {others}"})
    stores = _last_writes(left, "y")
    if not stores:
        raise Refuted({"reason": "the grouped launch never stores y"})
    compared = 0
    for sl in stores:
        compared += _prove_store(src, spec, left, sl, tile.z3())
    _unique(left, "y", "left", _injectivity)
    stats["paths"] = left.paths
    stats["compared_store_pairs"] = compared
    if compared == 0:
        raise Unsupported("goal", "no pair of stores was compared (inconsistent facts?)")


def _prove_store(src, spec: GroupedSpec, left: Execution, sl, tile) -> int:
    """The value one left store writes equals the linear's at the row's place."""
    row, term, col = _row_split(sl, spec.n)
    facts = [*left.facts, *_active(sl, {}, sl.offset)]
    lo, hi = _mem("tile_lo", tile), _mem("tile_hi", tile)
    _check(facts, term.z3() == _mem("y_rows", row) * spec.n,
           "y: the store's row is not y_rows of the row it computes", sl.where)  # fmt: skip
    _check(facts, z3.And(row >= lo, row < hi),
           "y: a row outside its program's tile [tile_lo, tile_hi) is stored", sl.where)  # fmt: skip
    _check(facts, z3.And(col.z3() >= 0, col.z3() < spec.n),
           "y: a column outside [0, N) is stored", sl.where)  # fmt: skip
    remap = _remap(_mem("x_rows", row), _mem("tile_expert", tile), spec)
    right = Execution("R", src, spec.right, remap=remap).run()
    base = [*facts, *right.facts]
    _coverage(right, "y", col, base, "right")
    compared = 0
    for sr in _last_writes(right, "y"):
        pair = [*base, *_active(sr, {}, col)]
        s = z3.Solver()
        s.add(*pair)
        if check(s) == z3.unsat:
            continue
        compared += 1
        _compare(sl, sr, pair, "y")
    return compared


# --- specializations ---------------------------------------------------------------------


def grouped_call(plan, launch):
    """`moe_grouped.grouped_linear`'s call: grid (T tiles, symbolic; n-tiles), bf16 operands,
    int32 tables."""
    from samebits.analysis.kernel_prover.specs import ACT
    from samebits.analysis.kernel_prover.symbolic.values import ArrayArg, KernelCall

    tiles = Lin.var(z3.Int("L.T"))
    gn = -(-plan.n // launch.block_n)
    args = dict(x_ptr=ArrayArg("x", ACT), w_ptr=ArrayArg("w", ACT), y_ptr=ArrayArg("y", ACT),
                x_rows_ptr=ArrayArg("x_rows", "i32"), y_rows_ptr=ArrayArg("y_rows", "i32"),
                tile_expert_ptr=ArrayArg("tile_expert", "i32"),
                tile_lo_ptr=ArrayArg("tile_lo", "i32"), tile_hi_ptr=ArrayArg("tile_hi", "i32"),
                N=plan.n, K=plan.k, RANGE_K=plan.range_k, SPLITS=plan.splits,
                BLOCK_M=launch.block_m, BLOCK_N=launch.block_n, BLOCK_K=plan.block_k)  # fmt: skip
    return KernelCall("moe_grouped_kernel", (tiles, gn), args, launch.num_warps,
                      symbolic_axes=(1,) if gn > 1 else ())  # fmt: skip


def reference_launch(plan):
    """The linear launch the grouped rows are proved equal to: M = 1's, pointer loads."""
    from samebits.kernels.triton.launches import choose_launch

    return choose_launch(plan, 1, tma=False)


def grouped_specs(tag: str, role: str, n: int, k: int) -> list[GroupedSpec]:
    """One specialization per grouped launch (`moe_grouped.GROUPED_TABLE`)."""
    from samebits.analysis.kernel_prover.specs import ACT, linear_calls
    from samebits.kernels.triton.certified.units import grouped_launch_name
    from samebits.kernels.triton.moe_grouped import grouped_launches
    from samebits.kernels.triton.splitplan import split_plan

    plan = split_plan(n, k, role)
    ref = reference_launch(plan)
    specs = []
    for la in grouped_launches():
        desc = dict(role=role, n=n, k=k, plan=repr(plan), grouped_launch=repr(la),
                    right_launch=repr(ref), tiles="symbolic (any routing)", right_M=1)  # fmt: skip
        specs.append(GroupedSpec(
            f"{tag}.grouped.{grouped_launch_name(la)}~{ref.kind}-bm{ref.block_m}-bn{ref.block_n}",
            "_moe_kernels.py", Goal(GROUPED, {"y": n}), [grouped_call(plan, la)],
            linear_calls(plan, ref, 1, False, ACT), n, k, desc,
        ))  # fmt: skip
    return specs


# --- the combine: rank order in fp32 (`moe_combine_kernel` vs the torch ops) -------------


def combine_calls(top_k: int, hidden: int, m) -> list:
    """`moe_grouped.combine`'s call: one program per (token, column block)."""
    from samebits.analysis.kernel_prover.specs import ACT
    from samebits.analysis.kernel_prover.symbolic.values import ArrayArg, KernelCall
    from samebits.kernels.triton.moe_grouped import COMBINE_WARPS, combine_block

    block = combine_block(hidden)
    args = dict(o_ptr=ArrayArg("o", ACT), w_ptr=ArrayArg("w", "fp32"), y_ptr=ArrayArg("y", ACT),
                H=hidden, TOP_K=top_k, BLOCK=block)  # fmt: skip
    return [KernelCall("moe_combine_kernel", (m, -(-hidden // block)), args, COMBINE_WARPS)]


def torch_combine_calls(top_k: int, hidden: int, m) -> list:
    """`kernels.moe.combine` op by op (`certified/moe_reference.py`): the rank-0 product,
    then per rank a product and an add into a fresh tensor, then the cast."""
    from samebits.analysis.kernel_prover.specs import ACT
    from samebits.analysis.kernel_prover.symbolic.values import ArrayArg, KernelCall
    from samebits.kernels.triton.moe_grouped import combine_block

    block = combine_block(hidden)
    grid = (m, -(-hidden // block))
    o, w = ArrayArg("o", ACT), ArrayArg("w", "fp32")

    def mul(r: int, out: str) -> KernelCall:
        args = dict(o_ptr=o, w_ptr=w, p_ptr=ArrayArg(out, "fp32"), H=hidden, TOP_K=top_k, R=r,
                    BLOCK=block)  # fmt: skip
        return KernelCall("torch_rank_mul_kernel", grid, args)

    calls = [mul(0, "acc0")]
    for r in range(1, top_k):
        args = dict(a_ptr=ArrayArg(f"acc{r - 1}", "fp32"), b_ptr=ArrayArg(f"p{r}", "fp32"),
                    s_ptr=ArrayArg(f"acc{r}", "fp32"), H=hidden, BLOCK=block)  # fmt: skip
        calls += [mul(r, f"p{r}"), KernelCall("torch_add_kernel", grid, args)]
    args = dict(a_ptr=ArrayArg(f"acc{top_k - 1}", "fp32"), y_ptr=ArrayArg("y", ACT), H=hidden,
                BLOCK=block)  # fmt: skip
    return calls + [KernelCall("torch_cast_kernel", grid, args)]


COMBINE_REFERENCE = "certified/moe_reference.py"


def combine_specs(tag: str, top_k: int, hidden: int) -> list:
    """Goal 1 of the combine kernel (rows: o [k * H], w [k]) and its equivalence with the torch
    ops of `kernels.moe.combine` (same inputs, same symbolic M)."""
    from samebits.analysis.kernel_prover.prover import BATCH, LAUNCH
    from samebits.analysis.kernel_prover.specs import Spec, _m_symbol

    desc = dict(op="combine", top_k=top_k, hidden=hidden)
    m, m2 = _m_symbol(), _m_symbol()
    return [
        Spec(f"{tag}.combine.batch", "_moe_kernels.py",
             Goal(BATCH, {"y": hidden}, {"o": top_k * hidden, "w": top_k}),
             combine_calls(top_k, hidden, m), combine_calls(top_k, hidden, 1), m,
             {**desc, "M": "symbolic (left) vs 1 (right)"}, (COMBINE_REFERENCE,)),
        Spec(f"{tag}.combine.equiv~torch-ops", "_moe_kernels.py", Goal(LAUNCH, {"y": hidden}),
             combine_calls(top_k, hidden, m2), torch_combine_calls(top_k, hidden, m2), m2,
             {**desc, "M": "symbolic", "right": "kernels.moe.combine op by op "
              "(certified/moe_reference.py)"}, (COMBINE_REFERENCE,)),
    ]  # fmt: skip


# --- the router: softmax, top-k, renormalization per row (`moe_router_kernel`) ------------

ROUTER_FILE = "_moe_router_kernel.py"


def router_calls(experts: int, top_k: int, normalize: bool, m) -> list:
    """`moe_router.route`'s call: one program per BLOCK_T rows (tiles a function of E only)."""
    from samebits.analysis.kernel_prover.symbolic.values import ArrayArg, CDiv, KernelCall
    from samebits.analysis.kernel_prover.terms import Lin
    from samebits.kernels.triton.moe_router import ROUTER_ELEMENTS, ROUTER_WARPS

    log_e = max(0, (experts - 1).bit_length())
    block_t = max(1, ROUTER_ELEMENTS >> log_e)
    mm = m if isinstance(m, Lin) else Lin((), m)
    args = dict(logits_ptr=ArrayArg("logits", "fp32"), ids_ptr=ArrayArg("ids", "i64"),
                w_ptr=ArrayArg("w", "fp32"), n=mm, E=experts, TOP_K=top_k,
                NORMALIZE=normalize, BLOCK_T=block_t, LOG_E=log_e,
                BLOCK_K=1 << max(0, (top_k - 1).bit_length()))  # fmt: skip
    return [KernelCall("moe_router_kernel", (CDiv(mm, block_t),), args, ROUTER_WARPS)]


def router_specs(tag: str, experts: int, top_k: int, normalize: bool) -> list:
    """Goal 1 of the router kernel: the ids and weights of row r from M rows (symbolic) equal
    those of the M = 1 launch on row r's logits alone (rows: logits [E])."""
    from samebits.analysis.kernel_prover.prover import BATCH
    from samebits.analysis.kernel_prover.specs import Spec, _m_symbol

    m = _m_symbol()
    desc = dict(op="router", experts=experts, top_k=top_k, normalize=normalize,
                M="symbolic (left) vs 1 (right)")  # fmt: skip
    goal = Goal(BATCH, {"ids": top_k, "w": top_k}, {"logits": experts})
    return [Spec(f"{tag}.router.batch", ROUTER_FILE, goal,
                 router_calls(experts, top_k, normalize, m),
                 router_calls(experts, top_k, normalize, 1), m, desc)]  # fmt: skip
