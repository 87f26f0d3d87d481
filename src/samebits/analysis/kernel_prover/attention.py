"""Attention goals 2 and 3: chunk invariance and page-layout invariance of the paged kernel.

Two executions ("L", "R") of ``paged_attention_kernel`` with *independent* metadata: their own
positions, programs (request, first token), query ends, block tables (and table widths), tile
heights BLOCK_M (so GQA packing: BLOCK_M // GROUP tokens x GROUP heads per tile) and block
sizes PAGE. A query row is identified by its absolute position ``t`` and head ``h``: in L it is
token ``tok_L`` of its request, in R token ``tok_R``. The relation between the executions:

- ``pos_L[tok_L] == pos_R[tok_R] == t``; the q row of (tok_L, h) in L equals that of (tok_R, h)
  in R (canonical array ``q`` indexed by the column);
- **equal KV prefix**: for keys ``0..t`` of the query's request, the logical KV content is
  equal (canonical arrays ``k``/``v`` indexed by ``key * HKV * D + head * D + column``). A read
  of the cache is mapped to its logical key by the block table that produced its address: the
  kernel loads ``page = bt[req * stride + b]`` and reads ``k[page * PAGE*HKV*D + rest]`` with
  ``0 <= rest < PAGE*HKV*D`` (checked), which is logical block ``b`` of the request (the
  definition of a block table, ``0 <= b < stride`` checked), i.e. key ``b * PAGE + rest //
  (HKV*D)``. Keys above ``t`` map to per-execution arrays (``k@L-beyond``): unrelated memory.

The goal: the value the program holding (tok, h) stores for column ``d`` of that row is the same
term in both executions, for a generic program / lane of each (the metadata is free).

The key-tile loop ``for j in range(0, last // BLOCK_N + 1)`` has a data-dependent trip count
and is summarized by induction over ``j`` (not unrolled; no bound on the context). With the
row's state before tile j an uninterpreted ``pre`` symbol shared by both executions (and the
other rows' states per-execution symbols), the prover shows:

1. *base*: the state before the loop is the same term in both;
2. *step*: for ``j >= 0`` with ``j * BLOCK_N <= t`` the state after the tile is the same term
   in both (so the update is the same function of the row's state and of j);
3. *frame*: for ``j * BLOCK_N > t`` the row's state is unchanged (each execution);
4. *coverage*: every tile with ``j * BLOCK_N <= t`` is run (``j < trip count``, each execution).

By induction, after the loop the row's state is ``S_J(t)`` in both (the fold of the same step
over the tiles ``j * BLOCK_N <= t``, in order), which is then used as a shared ``final`` symbol.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.specs import MODELS
from samebits.analysis.kernel_prover.symbolic.execution import Execution
from samebits.analysis.kernel_prover.symbolic.memory import Store, _active
from samebits.analysis.kernel_prover.symbolic.source import KernelSource
from samebits.analysis.kernel_prover.symbolic.tl_semantics import opaque_mul
from samebits.analysis.kernel_prover.symbolic.values import (
    ArrayArg,
    FloatArg,
    KernelCall,
    Tile,
    Unsupported,
)
from samebits.analysis.kernel_prover.terms import Lin, Term
from samebits.kernels.triton.certified.units import ATTENTION_PAGES

ATTENTION = "attention_invariance"
ACT = "bf16"
RULES = frozenset({"ctx", "zero-product"})
EXEC_RULES = frozenset({"max-any-order", "sum-of-zeros"})

ASSUMPTIONS = {
    "tl.max-exact": "tl.max over a float tile is the exact maximum of its elements whatever the "
    "reduction tree / layout: IEEE max is order-independent except for NaN and the sign of a "
    "zero tie. Assumed: no NaN among the scores (finite q, k; masked keys are -inf, not NaN); a "
    "-0.0/+0.0 tie may pick either zero, which is harmless here because the running max only "
    "enters exp2(s - m) and exp2(m_old - m_new), and x - (+0.0) == x - (-0.0) for x != 0 while "
    "exp2(+-0.0) == 1. Integer tl.max is exact (no assumption).",
    "sum-of-zeros": "a tl.sum whose elements are all the constant +0.0 except one, x, returns x "
    "in any order and layout (x + (+0.0) == x exactly unless x == -0.0); applied only when x is "
    "a tl.dot chain started from +0.0 (the p @ ones denominator: products of p >= 0 and 1.0, so "
    "never -0.0)",
    "zero-product": "in a tl.dot k-atom, a product whose left operand is exactly +0.0 contributes "
    "nothing, whatever its right operand, provided that operand is finite: +0.0 * v == +-0.0 and "
    "the chain starts from +0.0, so a zero addend never changes the rounded sum (the sign of an "
    "all-zero sum is +0.0 either way). Used for p == +0.0 at keys above the query's position, "
    "whose v (a later token's value, or the other=0.0 of a masked load) differs between the "
    "executions",
    "finite-scores": "q and the cached k, v the kernel reads are finite; so for a row with a live "
    "key in the tile the running max m_new is finite and exp2(-inf - m_new) == +0.0 exactly",
    "metadata": "host metadata (attention_meta.py) preconditions, not proved here: a program's "
    "rows are tokens of its own request (prog_req / prog_row0 / query_end), each query token "
    "is held by exactly one program (tested: tests/analysis/test_kernel_prover_attention.py), "
    "every program has a live row and positions are >= 0 (so last >= 0), and a request's "
    "block-table row covers its keys (stride * PAGE > last); distinct block-table entries of "
    "one request may share a physical page only with equal content (prefix caching)",
    "kernel-sequencing": "one kernel call; the KV cache is written before the call (stream order)",
}


@dataclass
class Side:
    """One execution's static launch facts (everything else is free metadata)."""

    block_m: int
    page: int

    def tag(self) -> str:
        return f"bm{self.block_m}-p{self.page}"


@dataclass
class AttentionSpec:
    name: str
    kernel_file: str
    model: str
    heads: int
    kv_heads: int
    head_dim: int
    block_n: int
    left: Side
    right: Side
    description: dict
    also_files: tuple = ()  # one kernel file (Spec.also_files: further files proved against)

    @property
    def goal(self):
        return _Goal(self)


class _Goal:
    def __init__(self, spec: AttentionSpec):
        self.kind = ATTENTION
        self.spec = spec

    def to_dict(self) -> dict:
        s = self.spec
        return {
            "kind": ATTENTION,
            "statement": "for every query row (position t, head h) and column d: the value "
            "stored by the program holding it in L equals that in R, for any chunking, "
            "tile height / GQA packing, block table and block size of either, given equal q "
            "row and equal KV prefix 0..t (goals 2 and 3)",
            "outputs": {"o": s.heads * s.head_dim},
            "key_tile": s.block_n,
            "loop": "summarized by induction over key tiles (no context bound)",
        }


def calls(side: str, spec: AttentionSpec, sd: Side) -> list[KernelCall]:
    """The launch `attention.paged_attention` makes (grid: programs x KV heads)."""
    g = spec.heads // spec.kv_heads
    arr = lambda n, dt: ArrayArg(f"{n}@{side}", dt)  # noqa: E731
    args = dict(
        q_ptr=ArrayArg("q", ACT), k_ptr=ArrayArg("k", ACT), v_ptr=ArrayArg("v", ACT),
        o_ptr=arr("o", ACT), pos_ptr=arr("pos", "i32"), req_ptr=arr("req", "i32"),
        row0_ptr=arr("row0", "i32"), qend_ptr=arr("qend", "i32"), bt_ptr=arr("bt", "i32"),
        bt_stride=Lin.var(z3.Int(f"{side}.bt_stride")), qk_scale=FloatArg("qk_scale"),
        HKV=spec.kv_heads, GROUP=g, D=spec.head_dim, PAGE=sd.page, BLOCK_M=sd.block_m,
        BLOCK_N=spec.block_n,
    )  # fmt: skip
    from samebits.kernels.triton.attention_meta import ATTENTION_WARPS

    grid = (Lin.var(z3.Int(f"{side}.programs")), Lin.var(z3.Int(f"{side}.grid_hkv")))
    return [KernelCall("paged_attention_kernel", grid, args, ATTENTION_WARPS)]


def attention_specs(model: str, dims: dict | None = None) -> list[AttentionSpec]:
    """The launch configurations a deployment may use (tile heights 64 for prefill / mixed
    steps and 16 for decode, block sizes 16 and 32), each proved against the first one, which
    is also proved against itself (other chunking and block tables). Both sides' metadata is
    free in every proof, so the relation is an equivalence: n proofs cover every pair."""
    from samebits.kernels.triton.attention import KEY_BLOCK
    from samebits.kernels.triton.attention_meta import DECODE_BLOCK_M, PREFILL_BLOCK_M

    c = {k: (dims or MODELS[model])[k] for k in ("heads", "kv_heads", "head_dim")}
    g = c["heads"] // c["kv_heads"]
    bms = sorted({max(b, 1 << (g - 1).bit_length()) for b in (PREFILL_BLOCK_M, DECODE_BLOCK_M)})
    sides = [Side(bm, page) for bm in bms[::-1] for page in ATTENTION_PAGES]
    ref = sides[0]
    out = []
    for b in sides:
        goals = ["chunk (goal 2)"] if b == ref else []
        if b.block_m != ref.block_m:
            goals.append("tile height / GQA packing (goal 2)")
        goals.append(
            "page layout (goal 3)" + (", block sizes differ" if b.page != ref.page else "")
        )
        out.append(
            AttentionSpec(
                f"{model}.attention.{ref.tag()}~{b.tag()}",
                "_attention_kernel.py",
                model,
                c["heads"],
                c["kv_heads"],
                c["head_dim"],
                KEY_BLOCK,
                ref,
                b,
                {
                    "model": model,
                    **c,
                    "group": g,
                    "key_tile": KEY_BLOCK,
                    "left": {"block_m": ref.block_m, "page": ref.page},
                    "right": {"block_m": b.block_m, "page": b.page},
                    "goals": goals,
                    "metadata": "free in both (any chunking, programs, block tables)",
                },
            )  # fmt: skip
        )
    return out


# --- the relational proof ----------------------------------------------------------------


class _Side:
    """Hooks of one execution: canonical reads, the loop summary, int-reduction facts."""

    def __init__(self, name: str, spec: AttentionSpec, sd: Side, shared: dict):
        self.name = name
        self.spec = spec
        self.sd = sd
        self.sh = shared
        self.rstar = Lin.var(z3.Int(f"{name}.rstar"))  # the lane of the compared row
        self.tok = Lin.var(z3.Int(f"{name}.tok"))  # its query token
        self.loops: list[dict] = []
        self.last: list[Lin] = []
        self.stride = Lin.var(z3.Int(f"{name}.bt_stride"))
        self.pid: Lin | None = None

    # canonical reads of q, k, v
    def read(self, prog, array, idx: Lin, mask, dtype, ambient):
        sp, sh = self.spec, self.sh
        if array == "q":
            base = self.tok.scale(sp.heads).add(sh["h"]).scale(sp.head_dim)
            off = idx.add(base, -1)
            inside = T.c_and(T.cmp(">=", off, T.ZERO), T.cmp("<", off, T.const(sp.head_dim)))
            return T.ite(
                inside, T.read("q", off, dtype), T.read(f"q@{self.name}-other", idx, dtype)
            )
        if array in ("k", "v"):
            return self._kv(prog, array, idx, dtype, ambient)
        return None

    def _kv(self, prog, array, idx, dtype, ambient):
        sp = self.spec
        hd = sp.kv_heads * sp.head_dim
        ps = self.sd.page * hd
        pid = prog.pids[0]
        if pid is None:
            raise Unsupported(prog.where(None), "KV read before tl.program_id(0)")
        req = Lin.var(z3.Function(f"mem.req@{self.name}", z3.IntSort(), z3.IntSort())(pid.z3()))
        rowbase = opaque_mul(req, self.stride)
        s = z3.Solver()
        s.set("timeout", 20000)
        s.add(*ambient)
        for app in _apps(idx, f"mem.bt@{self.name}"):
            rest = idx.add(Lin.var(app).scale(ps), -1)
            blk = Lin.of_z3(app.arg(0)).add(rowbase, -1)
            ok = z3.And(rest.z3() >= 0, rest.z3() < ps, blk.z3() >= 0, blk.z3() < self.stride.z3())
            s.push()
            s.add(z3.Not(ok))
            res = s.check()
            s.pop()
            if res == z3.unsat:
                canon = blk.scale(ps).add(rest)
                beyond = T.cmp(">=", canon, self.sh["t"].add(T.const(1)).scale(hd))
                return T.ite(
                    beyond,
                    T.read(f"{array}@{self.name}-beyond", canon, dtype),
                    T.read(array, canon, dtype),
                )
        # not an address inside a page the request's block table maps: unrelated memory
        return T.read(f"{array}@{self.name}-raw", idx, dtype)

    def int_reduce_facts(self, name, red: Lin) -> list:
        if name != "max":
            return []
        self.last.append(red)
        # metadata preconditions: a program has a live row with position >= 0; the request's
        # block-table row covers its keys
        return [red.z3() >= 0, self.stride.z3() * self.sd.page > red.z3()]

    # the key-tile loop, summarized
    def loop(self, prog, s: ast.For, env: dict, bounds: list) -> None:
        where = prog.where(s)
        if len(bounds) != 2 or bounds[0] != 0 or not isinstance(bounds[1], Tile):
            raise Unsupported(where, "summarized loop: range(0, n) with a runtime n only")
        bound = bounds[1].v
        assigned = _assigned(s.body)
        carried = [x for x in assigned if x in env]
        if not carried:
            raise Unsupported(where, "summarized loop carries no state")
        j = Lin.var(z3.Int(f"loop{s.lineno}.j"))
        body = dict(env)
        body[s.target.id] = Tile("int", (), j, "i32")
        pre = {x: self._state(prog, env[x], x, "pre", where) for x in carried}
        body.update(pre)
        path, taken, nstores = list(prog.path), len(prog.taken), len(prog.ex.stores)
        prog.path.append(T.cmp(">=", j, T.ZERO))
        for st in s.body:
            prog.stmt(st, body)
        if len(prog.taken) != taken or len(prog.ex.stores) != nstores:
            raise Unsupported(where, "summarized loop body branches on a runtime value or stores")
        prog.path = path
        self.loops.append(
            dict(
                j=j,
                bound=bound,
                where=where,
                init={x: env[x] for x in carried},
                pre=pre,
                post={x: body[x] for x in carried},
            )  # fmt: skip
        )
        for x in carried:
            env[x] = self._state(prog, env[x], x, "final", where)
        for x in [*assigned, s.target.id]:
            if x not in carried:
                env.pop(x, None)

    def _state(self, prog, like, name: str, tag: str, where) -> Tile:
        """The state of a carried tile: a symbol shared by both executions for the compared
        row (lane == rstar), per-execution symbols for the other rows."""
        if not (isinstance(like, Tile) and like.kind == "float" and like.dims):
            raise Unsupported(where, f"summarized loop state {name!r} must be a float tile")
        dims = []
        for size, _ in like.dims:
            if size == 1:
                dims.append((1, None))
            else:
                dims.append((size, prog.ex.fresh("lane", 0, size).terms[0][0]))
        row = dims[0][1]
        if row is None or dims[0][0] != self.sd.block_m:
            raise Unsupported(where, f"loop state {name!r}: first axis must be the tile rows")
        cols = tuple(Lin(((k, 1),), 0) for _, k in dims[1:] if k is not None)
        mine = Term("state", (name, tag, *cols), like.dtype)
        other = Term("state", (name, f"{tag}-other@{self.name}", Lin(((row, 1),), 0), *cols),
                     like.dtype)  # fmt: skip
        rowvar = Lin(((row, 1),), 0)
        return Tile("float", tuple(dims), T.ite(T.cmp("==", rowvar, self.rstar), mine, other),
                    like.dtype)  # fmt: skip


def _assigned(stmts) -> list[str]:
    out = []
    for node in stmts:
        for n in ast.walk(node):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) and n.id not in out:
                out.append(n.id)
    return out


def _apps(x: Lin, decl: str) -> list:
    out, seen = [], set()
    stack = [T.atom(k) for k, _ in x.terms]
    while stack:
        e = stack.pop()
        if e.get_id() in seen:
            continue
        seen.add(e.get_id())
        if z3.is_app(e) and e.decl().name() == decl and e.num_args() == 1:
            out.append(e)
        stack.extend(e.children())
    return out


def _row_value(tile: Tile, rstar: Lin, dd: Lin):
    """The value of a [rows, cols] (or [rows]) tile at row rstar, column dd."""
    sub = {tile.dims[0][1]: rstar}
    if len(tile.dims) == 2 and tile.dims[1][1] is not None:
        sub[tile.dims[1][1]] = dd
    return T.subst_term(tile.v, sub)


class _V:
    def __init__(self, value, where):
        self.value, self.where = value, where


def prove_attention(src: KernelSource, spec: AttentionSpec):
    import time

    from samebits.analysis.kernel_prover.prover import (
        Refuted,
        Result,
        _compare,
        _final,
    )

    t0 = time.perf_counter()
    stats: dict = {}
    goal = spec.goal
    try:
        _prove(src, spec, stats, Refuted, _compare, _final)
    except Unsupported as u:
        return Result(False, goal, time.perf_counter() - t0, stats, unsupported=str(u))
    except Refuted as r:
        return Result(False, goal, time.perf_counter() - t0, stats, counterexample=r.cex)
    return Result(True, goal, time.perf_counter() - t0, stats)


def _prove(src, spec: AttentionSpec, stats, Refuted, _compare, _final) -> None:
    t = z3.Int("attn.t")
    h = z3.Int("attn.h")
    dd = z3.Int("attn.d")
    shared = {"t": Lin.var(t), "h": Lin.var(h)}
    D, H = spec.head_dim, spec.heads
    base = [t >= 0, h >= 0, h < H, dd >= 0, dd < D]
    sides, exs = {}, {}
    for name, sd in (("L", spec.left), ("R", spec.right)):
        side = _Side(name, spec, sd, shared)
        ex = Execution(name, src, calls(name, spec, sd))
        ex.loop_hook, ex.read_hook = side.loop, side.read
        ex.int_reduce_facts = side.int_reduce_facts
        ex.focus_lanes = {sd.block_m: side.rstar}
        ex.rules = EXEC_RULES
        ex.opaque_mul = True
        rs = side.rstar.z3()
        ex.facts += [
            z3.Int(f"{name}.programs") >= 1, z3.Int(f"{name}.grid_hkv") == spec.kv_heads,
            rs >= 0, rs < sd.block_m, side.stride.z3() >= 1,
        ]  # fmt: skip
        ex.run()
        if ex.paths != 1:
            raise Unsupported(spec.kernel_file, f"{ex.paths} paths (one expected)")
        if len(side.loops) != 1:
            raise Unsupported(spec.kernel_file, "expected exactly one summarized key-tile loop")
        sides[name], exs[name] = side, ex
        pos = z3.Function(f"mem.pos@{name}", z3.IntSort(), z3.IntSort())
        base += [*ex.facts, pos(side.tok.z3()) == t, side.tok.z3() >= 0]

    # the stored element: the compared row's lane writes o[(tok * H + h) * D + d]
    stores = {}
    for name in ("L", "R"):
        ex, side = exs[name], sides[name]
        sts = _final(ex, f"o@{name}")
        if len(sts) != 1:
            raise Unsupported(spec.kernel_file, f"o@{name}: {len(sts)} stores (one expected)")
        st = sts[0]
        lanes = [k for k in st.wvars if k in st.ranges and st.ranges[k][0] == T.ZERO
                 and st.ranges[k][1].is_const() and k not in _pid_keys(st)]  # fmt: skip
        if len(lanes) != 2:
            raise Unsupported(st.where, "o store: a [rows, head_dim] tile expected")
        sub = {lanes[0]: side.rstar, lanes[1]: Lin.var(dd)}
        target = side.tok.scale(H).add(shared["h"]).scale(D).add(Lin.var(dd))
        base += _active(st, sub, target)
        stores[name] = (st, sub)

    s = z3.Solver()
    s.add(*base)
    if s.check() == z3.unsat:
        raise Unsupported("goal", "the executions' facts are inconsistent (vacuous proof)")
    dl = Lin.var(dd)
    loops = {n: sides[n].loops[0] for n in sides}
    lp_l, lp_r = loops["L"], loops["R"]
    j = lp_l["j"]
    bn = spec.block_n
    jz = j.z3()
    active = [jz >= 0, jz * bn <= t]
    compared = 0

    def cmp(a, b, facts, label):
        nonlocal compared
        compared += 1
        try:
            _compare(_V(a, label), _V(b, label), facts, label, rules=RULES)
        except Refuted as r:
            r.cex["obligation"] = label
            raise

    rl, rr = sides["L"].rstar, sides["R"].rstar
    names = list(lp_l["init"])
    if names != list(lp_r["init"]):
        raise Unsupported(lp_l["where"], "the two executions carry different loop state")

    def state(lp, which, rst):
        # the carried values of the compared row, as one term (one comparison shares the
        # subterms of m, l and acc: the running max, the scores)
        return Term("loop-state", tuple(_row_value(lp[which][x], rst, dl) for x in names), "fp32")

    # 1. base: the state before the first tile
    cmp(state(lp_l, "init", rl), state(lp_r, "init", rr), base,
        f"loop state {names}: before the first key tile")  # fmt: skip
    # 2. step: a tile with a live key of the row updates it the same way in both
    cmp(state(lp_l, "post", rl), state(lp_r, "post", rr), [*base, *active],
        f"loop state {names}: update by key tile j (j*BLOCK_N <= t)")  # fmt: skip
    for name, lp in loops.items():
        rst = sides[name].rstar
        # 4. coverage: every tile with a key <= t is run
        cov = z3.Solver()
        cov.add(*base, *active, jz >= lp["bound"].z3())
        if cov.check() != z3.unsat:
            raise Refuted(
                {"reason": f"{name}: the loop at {lp['where']} may stop before the key tile "
                 "holding the query's position", "obligation": "coverage"}
            )  # fmt: skip
        # 3. frame: a tile past the row's position leaves its state unchanged
        cmp(state(lp, "post", rst), state(lp, "pre", rst),
            [*base, jz >= 0, jz * bn > t, jz < lp["bound"].z3()],
            f"{name}: loop state {names}: key tile j past the row (j*BLOCK_N > t)")  # fmt: skip
    # the stored values, with the loop's result as the shared final state
    (sl, subl), (sr, subr) = stores["L"], stores["R"]
    cmp(T.subst_term(sl.value, subl), T.subst_term(sr.value, subr), base, "o")
    stats["compared"] = compared
    stats["layout_reductions"] = sorted({repr(x) for x in exs["L"].layouts | exs["R"].layouts})


def _pid_keys(st: Store) -> set:
    return {x.terms[0][0] for x in st.pids if not x.is_const()}
