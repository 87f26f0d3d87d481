"""Attention goals: chunk invariance (2), page-layout invariance (3) of the span kernel, and
launch equivalence (4) of split-KV decode with spans in sequence.

Two executions ("L", "R") with *independent* metadata: their own positions, programs
(request, first token), query ends, block tables (and table widths), tile heights BLOCK_M (so
GQA packing: BLOCK_M // GROUP tokens x GROUP heads per tile) and block sizes PAGE. L is always
``paged_attention_kernel`` (spans in sequence); R is either that kernel again (goals 2 and 3)
or the split-KV decode launch, ``split_span_kernel`` then ``merge_spans_kernel`` over the same
fp32 scratch (goal 4; any number of programs per request, a symbolic grid axis). A query row
is identified by its absolute position ``t`` and head ``h``: in L it is token ``tok_L`` of its
request, in R token ``tok_R``. The relation between the executions:

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

Loops with a data-dependent trip count are summarized by induction over their iteration index
(never unrolled; no bound on the context). A loop ``for x in range(start, stop, step)`` (step a
positive constant) that carries state is a *fold*: its body is executed once with a symbolic
index ``j`` (``x = start + j * step``) and the carried state (for the spans: m, l, acc; for the
key tiles of a span: m_s, l_s, acc_s) replaced by a ``pre`` symbol shared by both executions
for the compared row (per-execution symbols for the other rows). Folds are nested (the key
tiles of a span inside the span loop) and paired between the executions: the same loop of the
same function, or (goal 4) the pairs the goal names (the merge loop of ``merge_spans_kernel``
with the span loop of ``paged_attention_kernel``; the key-tile loop of ``_attend_span`` in
both). For a pair, with the indices and the enclosing iterations unified, the prover shows:

1. *base*: the state before the loop is the same term in both;
2. *step*: for an iteration both run, the state after it is the same term in both (the update
   is the same function of the row's state, the index and the enclosing iterations);
3. *frame*: for an iteration only one execution runs, its state is unchanged (each side).

By induction both loops end in the fold of the same update over the iterations both run, in
order; that result is a ``final`` symbol shared by both, parameterized by the enclosing
iterations (the span of a key-tile loop), so a value computed for one span can only stand
where that same span's value is expected.

A loop ``for s in range(tl.program_id(a), stop, tl.num_programs(a))`` (the split kernel: program
(kv head, j, r) computes spans j, j + S, ...) is a *grid-stride* loop: its iterations over all
programs of axis a are exactly the values ``0 <= s < stop`` (stop independent of the axis),
each computed once; its body is executed once with a symbolic value ``s`` and must carry no
state (a fold over a program's own spans would depend on S) and store nothing that depends on
the program id of axis a. Its stores are then records written by ``s`` instead of that program
id, which the merge kernel's reads resolve to (the scratch is memory written by the earlier
call, then read; every read must be written, and the scratch stores are proved injective).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.attention_int32 import check_int32
from samebits.analysis.kernel_prover.solving import check
from samebits.analysis.kernel_prover.specs import MODELS
from samebits.analysis.kernel_prover.symbolic.execution import Execution
from samebits.analysis.kernel_prover.symbolic.folds import _assigned, _replace
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
from samebits.kernels.triton.certified.units import ALSO_FILES, ATTENTION_BOUNDS, ATTENTION_PAGES

ATTENTION = "attention_invariance"
ACT = "bf16"
RULES = frozenset({"ctx", "zero-product"})
EXEC_RULES = frozenset({"max-any-order", "sum-of-zeros", "dot-lanes"})
PAGED, SPLIT = "paged", "split"
PAGED_KERNEL = "paged_attention_kernel"
SPLIT_KERNEL = "split_span_kernel"
SPLIT_SPANS = "_split_spans"  # the split kernel's grid-stride span loop, in this helper
MERGE_KERNEL = "merge_spans_kernel"
SCRATCH = ("ms", "ls", "accs")  # the split launch's span states (fp32), [token, span, head]
# goal 4: the loops of the split launch paired with those of the sequential-span kernel, by
# (function, ordinal of the `for` in it): the merge loop folds the spans in order as the span
# loop does; the grid-stride span loop of the split kernel computes the span the span loop's
# iteration computes (the context of the key-tile loop of `_attend_span`, the same in both;
# the split kernel runs its loop in `_split_spans`)
SPLIT_PAIRS = {(MERGE_KERNEL, 0): (PAGED_KERNEL, 0), (SPLIT_SPANS, 0): (PAGED_KERNEL, 0)}

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
    "kernel-sequencing": "the kernel calls of one launch run in order (stream order); the KV "
    "cache is written before the launch",
}
# named only by the certificates of the split-KV launch (goal 4)
SPLIT_ASSUMPTIONS = {
    "split-metadata": "host preconditions of the split-KV decode launch (attention._split_decode, "
    "attention.decode_splits), not proved here: every request has one query token and token r "
    "is request r's (one_token_each); max_spans * SPAN > the position of every token "
    "(max_spans = max_position // SPAN + 1, max_position a bound on the step's positions); the "
    "scratch tensors are the launch's own (written by split_span_kernel, then read by "
    "merge_spans_kernel, nothing else in between)",
}


@dataclass
class Side:
    """One execution's static launch facts (everything else is free metadata)."""

    block_m: int
    page: int
    launch: str = PAGED  # PAGED (paged_attention_kernel) or SPLIT (split + merge kernels)

    def tag(self) -> str:
        t = f"bm{self.block_m}-p{self.page}"
        return t if self.launch == PAGED else f"split-{t}"


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
    also_files: tuple = ALSO_FILES["attention"]  # further files proved against: softexp2
    span: int = 0  # SPAN (keys per span); 0: the plan's (ATTENTION_SPAN)
    # R loop (function, ordinal) -> the L loop it is paired with (default: the same loop)
    pairs: dict = field(default_factory=dict)
    # R loop (function, ordinal) -> iterations of its L loop one of its trips stands for
    # (default 1; the split launch's merge folds MERGE_UNROLL spans a trip)
    trips: dict = field(default_factory=dict)
    # a head class: the KV head count is the shape symbol KV in these inclusive bounds (the
    # group heads // kv_heads and head_dim stay fixed); None: kv_heads as given
    kv_class: tuple | None = None

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads

    def kv_lin(self) -> Lin:
        """The KV head count: the constant, or the class's shape symbol ``shape.KV``."""
        return KV_SYMBOL() if self.kv_class else T.const(self.kv_heads)

    def heads_lin(self) -> Lin:
        return self.kv_lin().scale(self.group)

    def times_heads(self, x: Lin, heads: Lin) -> Lin:
        """``x * heads`` as the kernels' index arithmetic forms it (an opaque product when
        the head count is symbolic, `tl_semantics.opaque_mul`)."""
        if heads.is_const():
            return x.scale(heads.const)
        return Lin.of_z3(opaque_mul(x, heads).z3())  # simplified, as the kernels' terms are

    def __post_init__(self):
        if not self.span:
            from samebits.kernels.plan import ATTENTION_SPAN

            self.span = ATTENTION_SPAN
        if self.right.launch == SPLIT and not self.pairs:
            self.pairs = dict(SPLIT_PAIRS)
        if self.right.launch == SPLIT and not self.trips:
            from samebits.kernels.triton.attention_meta import MERGE_UNROLL

            self.trips = {(MERGE_KERNEL, 0): MERGE_UNROLL}

    @property
    def goal(self):
        return _Goal(self)


class _Goal:
    def __init__(self, spec: AttentionSpec):
        self.kind = ATTENTION
        self.spec = spec

    def to_dict(self) -> dict:
        s = self.spec
        if s.right.launch == SPLIT:
            statement = (
                "for every decode query row (position t, head h) and column d: the value the "
                "split-KV decode launch (split_span_kernel: program (kv head, j, r) computes "
                "spans j, j + S, ... and stores their states; merge_spans_kernel folds them in "
                "span order) stores equals the value the sequential-span kernel (any chunking, "
                "tile height, block table, block size) stores for that row, for any number S "
                "of programs per request, given equal q row and equal KV prefix 0..t (goal 4)"
            )
        else:
            statement = (
                "for every query row (position t, head h) and column d: the value stored by "
                "the program holding it in L equals that in R, for any chunking, tile height "
                "/ GQA packing, block table and block size of either, given equal q row and "
                "equal KV prefix 0..t (goals 2 and 3)"
            )
        return {
            "kind": ATTENTION,
            "statement": statement,
            "outputs": {"o": f"{s.group * s.head_dim}*KV" if s.kv_class else s.heads * s.head_dim},
            **({"shape": {"KV": list(s.kv_class)}} if s.kv_class else {}),
            "key_tile": s.block_n,
            "span": s.span,
            "launches": [s.left.launch, s.right.launch],
            "int32": {"bounds": dict(ATTENTION_BOUNDS), "statement": "every int32 + - * of "
                      "both executions stays in [-2^31, 2^31) for every metadata value within "
                      "the bounds (attention_int32.py)"},
            "loop": "summarized by induction over the spans and over the key tiles of a span "
            "(no context bound)"
            + ("; split spans: a grid-stride loop over any number of programs" if
               s.right.launch == SPLIT else ""),
        }  # fmt: skip


def KV_SYMBOL() -> Lin:  # noqa: N802
    """The KV head count of a head class: one integer shared by both executions."""
    return Lin.var(z3.Int("shape.KV"))


def WINDOW() -> Lin:  # noqa: N802
    """The sliding window (keys per query; `attention.FULL_WINDOW` for full attention): one
    integer shared by both executions (a property of the layer, never of the launch), free."""
    return Lin.var(z3.Int("window"))


def calls(side: str, spec: AttentionSpec, sd: Side) -> list[KernelCall]:
    """The launch `attention.paged_attention` makes: spans in sequence (grid: programs x KV
    heads), or `attention._split_decode` (split grid: KV heads x S x requests; merge grid:
    requests x KV heads)."""
    from samebits.kernels.triton.attention_meta import (
        MERGE_UNROLL,
        MERGE_WARPS,
        SPLIT_WARPS,
        default_num_warps,
        merge_block_m,
    )

    g = spec.heads // spec.kv_heads
    arr = lambda n, dt: ArrayArg(f"{n}@{side}", dt)  # noqa: E731
    var = lambda n: Lin.var(z3.Int(f"{side}.{n}"))  # noqa: E731
    hkv = spec.kv_lin() if spec.kv_class else spec.kv_heads
    facts = dict(HKV=hkv, GROUP=g, D=spec.head_dim, BLOCK_M=sd.block_m, SPAN=spec.span)
    if sd.launch == PAGED:
        args = dict(
            q_ptr=ArrayArg("q", ACT), k_ptr=ArrayArg("k", ACT), v_ptr=ArrayArg("v", ACT),
            o_ptr=arr("o", ACT), pos_ptr=arr("pos", "i32"), req_ptr=arr("req", "i32"),
            row0_ptr=arr("row0", "i32"), qend_ptr=arr("qend", "i32"), bt_ptr=arr("bt", "i32"),
            bt_stride=var("bt_stride"), qk_scale=FloatArg("qk_scale"), window=WINDOW(),
            PAGE=sd.page, BLOCK_N=spec.block_n, **facts,
        )  # fmt: skip
        grid = (var("programs"), var("grid_hkv"))
        return [KernelCall(PAGED_KERNEL, grid, args, default_num_warps(sd.block_m))]
    scratch = {f"{n}_ptr": arr(n, "fp32") for n in SCRATCH}
    split = dict(
        q_ptr=ArrayArg("q", ACT), k_ptr=ArrayArg("k", ACT), v_ptr=ArrayArg("v", ACT), **scratch,
        pos_ptr=arr("pos", "i32"), bt_ptr=arr("bt", "i32"), bt_stride=var("bt_stride"),
        max_spans=var("max_spans"), qk_scale=FloatArg("qk_scale"), window=WINDOW(),
        PAGE=sd.page, BLOCK_N=spec.block_n, **facts,
    )  # fmt: skip
    merge = dict(o_ptr=arr("o", ACT), **scratch, pos_ptr=arr("pos", "i32"),
                 max_spans=var("max_spans"), window=WINDOW(), UNROLL=MERGE_UNROLL,
                 **{**facts, "BLOCK_M": merge_block_m(g)})  # fmt: skip
    return [
        KernelCall(
            SPLIT_KERNEL, (var("grid_hkv"), var("splits"), var("requests")), split, SPLIT_WARPS
        ),  # fmt: skip
        KernelCall(MERGE_KERNEL, (var("requests"), var("grid_hkv")), merge, MERGE_WARPS),
    ]


def attention_specs(model: str, dims: dict | None = None) -> list[AttentionSpec]:
    """The launch configurations a deployment may use, each proved against the first one
    (BLOCK_M 64, block size 16), which is also proved against itself (other chunking and block
    tables): sequential spans at the tile heights 64 (prefill / mixed steps), 128 (long
    prompts) and 16 (decode) and block sizes 16 and 32 (goals 2, 3), and the split-KV decode launch at the decode tile
    height and each block size (goal 4). Both sides' metadata is free in every proof, so the
    relation is an equivalence: n proofs cover every pair."""
    from samebits.kernels.plan import ATTENTION_SPAN
    from samebits.kernels.triton.attention import KEY_BLOCK
    from samebits.kernels.triton.attention_meta import (
        PREFILL_BLOCK_M,
        default_block_m,
        merge_block_m,
        tile_heights,
    )

    c = {k: (dims or MODELS[model])[k] for k in ("heads", "kv_heads", "head_dim")}
    g = c["heads"] // c["kv_heads"]
    ref_bm = max(PREFILL_BLOCK_M, 1 << (g - 1).bit_length())  # the mixed steps' tile first
    bms = sorted(tile_heights(g), key=lambda b: (b != ref_bm, -b))
    decode_bm = default_block_m(1, g)  # the split launch runs decode steps only
    sides = [Side(bm, page) for bm in bms for page in ATTENTION_PAGES]
    sides += [Side(decode_bm, page, SPLIT) for page in ATTENTION_PAGES]
    ref = sides[0]
    out = []
    for b in sides:
        goals = ["chunk (goal 2)"] if b == ref else []
        if b.launch == SPLIT:
            goals.append("split-KV decode = spans in sequence (goal 4)")
        elif b.block_m != ref.block_m:
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
                    "span": ATTENTION_SPAN,
                    "span_tiles": ATTENTION_SPAN // KEY_BLOCK,
                    "left": {"block_m": ref.block_m, "page": ref.page, "launch": ref.launch},
                    "right": {"block_m": b.block_m, "page": b.page, "launch": b.launch}
                    | ({"merge_block_m": merge_block_m(g)} if b.launch == SPLIT else {}),
                    "goals": goals,
                    "metadata": "free in both (any chunking, programs, block tables"
                    + (", programs per request" if b.launch == SPLIT else "")
                    + ")",
                    "sizes": "the deployment's span and key tile (the loops are summarized "
                    "by induction: any number of spans, tiles per span and positions)",
                },
                span=ATTENTION_SPAN,
            )  # fmt: skip
        )
    return out


# --- the relational proof ----------------------------------------------------------------


@dataclass
class _Loop:
    """A summarized loop of one execution: a fold, or a grid-stride loop (``kind``)."""

    kind: str
    key: tuple  # (function, ordinal of the `for` in it, occurrence)
    canon: str  # the L loop it is paired with (L: its own key)
    var: Lin  # fold: the iteration index; grid: the loop value
    start: Lin
    stop: Lin
    step: Lin
    ctx: tuple  # enclosing summarized loops, outermost first
    where: str
    names: list = field(default_factory=list)
    init: dict = field(default_factory=dict)
    pre: dict = field(default_factory=dict)
    post: dict = field(default_factory=dict)

    def runs(self) -> list:
        """Z3 facts: iteration ``var`` runs (a fold's index; a grid loop's value)."""
        if self.kind == "grid":
            return [self.var.z3() >= 0, self.var.z3() < self.stop.z3()]
        value = self.start.add(T.mul(self.var, self.step))
        return [self.var.z3() >= 0, value.z3() < self.stop.z3()]


def _blocks(node) -> list:
    """The statement lists a node holds (a function's, a loop's or a branch's body)."""
    return [b for f in ("body", "orelse") if isinstance(b := getattr(node, f, None), list)]


def _tile_ite(c, a: Tile, b: Tile, where) -> Tile:
    """Elementwise ``a if c else b`` of two tiles of one shape (a scalar condition)."""
    if not (isinstance(a, Tile) and isinstance(b, Tile) and a.kind == b.kind == "float"
            and [n for n, _ in a.dims] == [n for n, _ in b.dims]):  # fmt: skip
        raise Unsupported(where, "loop chain: the loops leave states of different shapes")
    sub = {lb: Lin(((la, 1),), 0) for (_, la), (_, lb) in zip(a.dims, b.dims, strict=True)
           if la is not None and lb is not None and la != lb}  # fmt: skip
    return Tile("float", a.dims, T.ite(c, a.v, T.subst_term(b.v, sub) if sub else b.v), a.dtype)


def _check_tiling(prog, start: Lin, starts: list, stops: list, step: Lin, where) -> None:
    """Under the path's facts the chain's ranges are in order and every non-empty one starts
    on the first one's grid (start + j * step), so its iterations are the chain's."""
    sv = z3.Solver()
    sv.add(*prog.facts())
    ordered = [x.z3() <= y.z3() for x, y in zip([start, *stops], stops, strict=False)]
    on_grid = [z3.Or(a.z3() >= b.z3(), (a.z3() - start.z3()) % step.z3() == 0)
               for a, b in zip(starts[1:], stops[1:], strict=True)]  # fmt: skip
    sv.add(z3.Not(z3.And(*ordered, *on_grid)))
    if sv.check() != z3.unsat:
        raise Unsupported(where, "loop chain: the ranges may not tile one progression")


def _merge_rows(spec: AttentionSpec) -> int:
    from samebits.kernels.triton.attention_meta import merge_block_m

    return merge_block_m(spec.group)


def _canon(key: tuple) -> str:
    return f"{key[0]}#{key[1]}.{key[2]}"


class _Side:
    """Hooks of one execution: canonical reads, the loop summaries, int-reduction facts."""

    def __init__(self, name: str, spec: AttentionSpec, sd: Side, shared: dict, src):
        self.name = name
        self.spec = spec
        self.sd = sd
        self.sh = shared
        self.rstar = Lin.var(z3.Int(f"{name}.rstar"))  # the lane of the compared row
        # tile heights of the side's kernels (the split launch's merge has its own): a row
        # lane of either is the compared row's at lane rstar (rows below GROUP are heads)
        self.rows = {sd.block_m} | ({_merge_rows(spec)} if sd.launch == SPLIT else set())
        self.tok = Lin.var(z3.Int(f"{name}.tok"))  # its query token
        self.hk = Lin.var(z3.Int(f"{name}.hk"))  # its KV head (pinned programs)
        self.loops: list[_Loop] = []
        self.stride = Lin.var(z3.Int(f"{name}.bt_stride"))
        self.max_spans = Lin.var(z3.Int(f"{name}.max_spans"))
        self.pairs = spec.pairs if name == "R" else {}
        self.stack: list[_Loop] = []
        self.seen: dict = {}
        # the `for` statements of every kernel function: (function, ordinal)
        self.fors: dict = {}
        self.after: dict = {}  # a `for` -> the statement right after it in its block
        for fname, fn in src.functions.items():
            nodes = sorted((n for n in ast.walk(fn) if isinstance(n, ast.For)),
                           key=lambda n: (n.lineno, n.col_offset))  # fmt: skip
            for k, n in enumerate(nodes):
                self.fors[id(n)] = (fname, k)
            for block in (b for n in ast.walk(fn) for b in _blocks(n)):
                for a, b in zip(block, block[1:], strict=False):
                    if isinstance(a, ast.For):
                        self.after[id(a)] = b
        self.chained: set = set()  # later loops of a chain already summarized with its first
        # the programs whose rows are the compared row (split launch: request = token, KV
        # head): (call index -> [(grid axis, value)]), set as facts before each call runs
        self.pins: dict = {}
        if sd.launch == SPLIT:
            self.pins = {0: [(2, self.tok), (0, self.hk)], 1: [(0, self.tok), (1, self.hk)]}

    # the programs of the compared row (split launch): pinned before each call runs
    def call_hook(self, ex, ci, call, pid_vars) -> None:
        for ax, val in self.pins.get(ci, []):
            if pid_vars[ax] is None:
                raise Unsupported(call.kernel, f"grid axis {ax} must be symbolic")
            ex.facts.append(pid_vars[ax].z3() == val.z3())

    def _prog_cond(self, prog):
        """The program computes the compared row (pinned calls; elsewhere the facts of the
        compared store do)."""
        c = True
        for ax, val in self.pins.get(prog.ci, []):
            c = T.c_and(c, T.cmp("==", prog.pid_vars[ax], val))
        return c

    # canonical reads of q, k, v
    def read(self, prog, array, idx: Lin, mask, dtype, ambient):
        sp, sh = self.spec, self.sh
        if array == "q":
            base = sp.times_heads(self.tok, sp.heads_lin()).add(sh["h"]).scale(sp.head_dim)
            off = idx.add(base, -1)
            inside = T.c_and(T.cmp(">=", off, T.ZERO), T.cmp("<", off, T.const(sp.head_dim)))
            return T.ite(
                inside, T.read("q", off, dtype), T.read(f"q@{self.name}-other", idx, dtype)
            )
        if array in ("k", "v"):
            return self._kv(prog, array, idx, dtype, ambient)
        return None

    def _request(self, prog) -> Lin:
        """The request whose block-table row the program reads: ``req_ptr[pid]`` (spans in
        sequence), the program id itself (split kernel: program r is request r's)."""
        pid = prog.pids[0]
        if pid is None:
            raise Unsupported(prog.where(None), "KV read before tl.program_id(0)")
        if prog.kcall.kernel == SPLIT_KERNEL:
            # program (hk, j, r) is request r's (token r); its reads are mapped relative to
            # the compared row's request (its programs are pinned to it), so a value another
            # request's program computed can never read as the compared row's keys
            return self.tok
        return Lin.var(z3.Function(f"mem.req@{self.name}", z3.IntSort(), z3.IntSort())(pid.z3()))

    def _kv(self, prog, array, idx, dtype, ambient):
        if self.spec.kv_class:
            return self._kv_class(prog, array, idx, dtype, ambient)
        sp = self.spec
        hd = sp.kv_heads * sp.head_dim
        ps = self.sd.page * hd
        rowbase = opaque_mul(self._request(prog), self.stride)
        s = z3.Solver()
        s.set("timeout", 20000)
        s.add(*ambient)
        for app in _apps(idx, f"mem.bt@{self.name}"):
            rest = idx.add(Lin.var(app).scale(ps), -1)
            blk = Lin.of_z3(app.arg(0)).add(rowbase, -1)
            ok = z3.And(rest.z3() >= 0, rest.z3() < ps, blk.z3() >= 0, blk.z3() < self.stride.z3())
            s.push()
            s.add(z3.Not(ok))
            res = check(s)
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

    def _kv_class(self, prog, array, idx, dtype, ambient):
        """A KV read of a head class: ``idx = D * imul(slot, KV) + rest`` with ``0 <= rest <
        KV * D`` (the kernel's ``(slot * HKV + hk) * D + d``), ``slot = bt[row + blk] * PAGE +
        r`` with ``0 <= r < PAGE`` and ``0 <= blk < stride``: key ``blk * PAGE + r`` of the
        request, read at the canonical ``D * imul(key, KV) + rest``."""
        sp = self.spec
        kv, d = sp.kv_lin(), sp.head_dim
        s = z3.Solver()
        s.set("timeout", 20000)
        s.add(*ambient)
        for app in _apps(idx, "imul", 2):
            if not app.arg(1).eq(kv.z3()):
                continue
            rest = idx.add(Lin.var(app).scale(d), -1)
            key = self._key(s, Lin.of_z3(app.arg(0)), prog)
            if key is None or not _proved(s, z3.And(rest.z3() >= 0, rest.z3() < kv.z3() * d)):
                continue
            canon = Lin.of_z3(opaque_mul(key, kv).z3()).scale(d).add(rest)
            beyond = T.cmp(">=", key, self.sh["t"].add(T.const(1)))
            return T.ite(beyond, T.read(f"{array}@{self.name}-beyond", canon, dtype),
                         T.read(array, canon, dtype))  # fmt: skip
        return T.read(f"{array}@{self.name}-raw", idx, dtype)

    def _key(self, s, slot: Lin, prog) -> Lin | None:
        """The request's key ``blk * PAGE + r`` a cache slot ``bt[row + blk] * PAGE + r``
        holds, where the facts prove ``0 <= r < PAGE`` and ``0 <= blk < stride``; else None."""
        page = self.sd.page
        rowbase = opaque_mul(self._request(prog), self.stride)
        for k, c in slot.terms:  # the page term: bt[...] or the masked load's If(m, bt[...], 0)
            if c != page:
                continue
            entry = T.atom(k)
            for app in _apps(Lin.var(entry), f"mem.bt@{self.name}"):
                rest = slot.add(Lin.var(entry).scale(page), -1)
                blk = Lin.of_z3(app.arg(0)).add(rowbase, -1)
                ok = z3.And(entry == app, rest.z3() >= 0, rest.z3() < page, blk.z3() >= 0,
                            blk.z3() < self.stride.z3())  # fmt: skip
                if _proved(s, ok):
                    return T.fold_divmod(blk.scale(page).add(rest))
        return None

    def int_reduce_facts(self, name, red: Lin, prog) -> list:
        if name != "max":
            return []
        # metadata preconditions: a program has a live row with position >= 0; the request's
        # block-table row covers its keys; the split launch's scratch has a row per span
        out = [red.z3() >= 0]
        if prog.kcall.kernel != MERGE_KERNEL:
            out.append(self.stride.z3() * self.sd.page > red.z3())
        if prog.kcall.kernel == SPLIT_KERNEL:
            out.append(self.max_spans.z3() * self.spec.span > red.z3())
        return out

    # --- summarized loops ----------------------------------------------------------------
    def loop(self, prog, s: ast.For, env: dict, bounds: list) -> None:
        if id(s) in self.chained:  # summarized with the chain's first loop
            self.chained.discard(id(s))
            return
        where = prog.where(s)
        fk = self.fors.get(id(s))
        if fk is None:
            raise Unsupported(where, "loop outside a kernel function")
        occ = self.seen.get(fk, 0)
        self.seen[fk] = occ + 1
        key = (*fk, occ)
        lkey = self.pairs.get(fk, fk)
        canon = _canon((*lkey, occ))
        if not 1 <= len(bounds) <= 3:
            raise Unsupported(where, "range() with 1 to 3 arguments")
        vals = [self._int(b, where) for b in bounds]
        start, stop, step = (
            (T.ZERO, vals[0], T.const(1)) if len(vals) == 1
            else (vals[0], vals[1], vals[2] if len(vals) == 3 else T.const(1))
        )  # fmt: skip
        assigned = _assigned(s.body)
        carried = [x for x in assigned if x in env]
        if step.is_const():
            if step.const <= 0:
                raise Unsupported(where, "summarized loop: the step must be positive")
            if not carried:
                raise Unsupported(where, "summarized loop carries no state")
            chain = self._chain(prog, s, env, stop, step, carried, where) or [(s, start, stop)]
            self._fold(prog, s, env, key, canon, start, chain, step, carried, where)
            return
        axis = next((a for a in range(len(prog.grid)) if prog.pids[a] is not None
                     and not prog.pids[a].is_const() and start == prog.pids[a]
                     and step == prog.grid[a]), None)  # fmt: skip
        if axis is None:
            raise Unsupported(where, "summarized loop: a runtime step other than the grid "
                              "stride range(tl.program_id(a), n, tl.num_programs(a))")  # fmt: skip
        if carried:
            raise Unsupported(where, f"grid-stride loop carries state {carried}: its fold would "
                              "follow the number of programs of the axis (num_programs)")  # fmt: skip
        self._grid(prog, s, env, key, canon, axis, stop, assigned, where)

    def _chain(self, prog, s, env, stop, step, carried, where) -> list:
        """The loops right after ``s`` that continue its key progression: ``for`` statements
        over the same target, carrying the same state, with the same constant step, each
        starting where the one before stops (its bounds read nothing the loops before assign,
        so they are evaluated here, before those loops). `_fold` checks the order and the
        grid. Returns [(loop, start, stop)] for ``s`` and them, or [] when none follows."""
        out, cur, prev_stop = [(s, None, stop)], s, stop
        names = {s.target.id, *_assigned(s.body)}  # what the loops before may have changed
        while isinstance(nxt := self.after.get(id(cur)), ast.For):
            it = nxt.iter
            if not (isinstance(nxt.target, ast.Name) and nxt.target.id == s.target.id
                    and isinstance(it, ast.Call) and len(it.args) == 3
                    and prog.func_name(it.func) in ("range", "tl.range")):  # fmt: skip
                break
            prog.check_loop_range(nxt, env)  # scheduling hints only, as the first loop's
            if names & {n.id for a in it.args for n in ast.walk(a) if isinstance(n, ast.Name)}:
                raise Unsupported(prog.where(nxt), "loop chain: a bound the loops before assign")
            a, b, c = (self._int(prog.expr(x, env), where) for x in it.args)
            gap = a.add(prev_stop, -1)
            if c != step or [x for x in _assigned(nxt.body) if x in env] != carried:
                break
            if not gap.is_const() or gap.const != 0:
                break
            out.append((nxt, a, b))
            names |= set(_assigned(nxt.body))
            cur, prev_stop = nxt, b
        return out if len(out) > 1 else []

    def _fold(self, prog, s, env, key, canon, start, chain, step, carried, where):
        """A loop, or consecutive loops over one progression (``_chain``), summarized as one
        fold: its body runs once at the symbolic iteration j (value = start + j * step) from
        the shared `pre` state; in a chain the update is the body of the loop whose range
        holds the value, and the loops' ranges must tile [start, last stop) in order."""
        stops = [b for _, _, b in chain]
        starts = [start] + stops[:-1]
        if len(chain) > 1:
            _check_tiling(prog, start, starts, stops, step, where)
        j = Lin.var(z3.Int(f"{self.name}.loop.{_canon(key)}.j"))
        rec = _Loop("fold", key, canon, j, start, stops[-1], step, tuple(self.stack), where,
                    list(carried))  # fmt: skip
        rec.init = {x: env[x] for x in carried}
        rec.pre = {x: self._state(prog, env[x], x, "pre", rec) for x in carried}
        value = start.add(T.mul(j, step))
        posts = []
        for k, ((node, _, _), a, b) in enumerate(zip(chain, starts, stops, strict=True)):
            body = {**env, s.target.id: Tile("int", (), value, "i32"), **rec.pre}
            runs = [T.cmp(">=", j, T.ZERO), T.cmp("<", value, b)]
            runs += [T.cmp(">=", value, a)] if k else []
            nstores = self._body(prog, node, body, rec, runs, where)
            if len(prog.ex.stores) != nstores:
                raise Unsupported(where, "a summarized loop that carries state also stores")
            posts.append({x: body[x] for x in carried})
        merged = posts[-1]
        for post, b in zip(posts[-2::-1], stops[-2::-1], strict=True):
            below = T.cmp("<", value, b)
            merged = {x: _tile_ite(below, post[x], merged[x], where) for x in carried}
        rec.post = merged
        self.loops.append(rec)
        self.chained |= {id(node) for node, _, _ in chain[1:]}
        for x in carried:
            env[x] = self._state(prog, env[x], x, "final", rec)
        for node, _, _ in chain:
            for x in [*_assigned(node.body), s.target.id]:
                if x not in carried:
                    env.pop(x, None)

    def _int(self, b, where) -> Lin:
        if isinstance(b, bool) or not isinstance(b, int | Tile):
            raise Unsupported(where, "loop bound must be an integer")
        if isinstance(b, int):
            return T.const(b)
        if b.kind != "int" or b.dims:
            raise Unsupported(where, "loop bound must be an integer scalar")
        return b.v

    def _body(self, prog, s, body: dict, rec: _Loop, runs: list, where) -> int:
        """Execute the loop body once for the symbolic iteration (no forks); the number of
        stores it made."""
        path, taken, nstores = list(prog.path), len(prog.taken), len(prog.ex.stores)
        prog.path += runs
        self.stack.append(rec)
        try:
            for st in s.body:
                if isinstance(st, ast.Break | ast.Continue):
                    raise Unsupported(prog.where(st), "break/continue")
                prog.stmt(st, body)
        finally:
            self.stack.pop()
            prog.path = path
        if len(prog.taken) != taken:
            raise Unsupported(where, "summarized loop body branches on a runtime value")
        return nstores

    def _grid(self, prog, s, env, key, canon, axis, stop, assigned, where):
        pk = prog.pids[axis].terms[0][0]
        if pk in _reach(prog.ex, _vars(stop)):
            raise Unsupported(where, "grid-stride loop: its bound depends on the program id")
        sv = z3.Solver()
        sv.add(*prog.facts(), prog.grid[axis].z3() < 1)
        if sv.check() != z3.unsat:
            raise Unsupported(where, "grid-stride loop: the grid axis may have no program")
        v = Lin.var(z3.Int(f"{self.name}.grid.{_canon(key)}.v"))
        rec = _Loop("grid", key, canon, v, T.ZERO, stop, prog.grid[axis], tuple(self.stack),
                    where)  # fmt: skip
        body = dict(env)
        body[s.target.id] = Tile("int", (), v, "i32")
        runs = [T.cmp(">=", v, T.ZERO), T.cmp("<", v, stop)]
        nstores = self._body(prog, s, body, rec, runs, where)
        vk = v.terms[0][0]
        for i in range(nstores, len(prog.ex.stores)):
            st = prog.ex.stores[i]
            deps = _vars(st.offset) | (T.free_atoms(st.value) if isinstance(st.value, Term)
                                       else _vars(st.value)) | _cond_vars(st.mask)  # fmt: skip
            if pk in deps:
                raise Unsupported(st.where, "a store of a grid-stride loop depends on the "
                                  "program id of the axis it strides over")  # fmt: skip
            # written by the loop value instead of the program id of the axis
            st.wvars = tuple(vk if k == pk else k for k in st.wvars)
            ranges = {k: r for k, r in st.ranges.items() if k != pk}
            ranges[vk] = (T.ZERO, stop)
            st.ranges = ranges
        self.loops.append(rec)
        for x in [*assigned, s.target.id]:
            env.pop(x, None)

    def _state(self, prog, like, name: str, tag: str, rec: _Loop) -> Tile:
        """The state of a carried tile: a symbol shared by both executions for the compared
        row (lane == rstar, in a program of the compared row), per-execution symbols for the
        other rows. ``final`` symbols are parameterized by the enclosing iterations."""
        where = rec.where
        if not (isinstance(like, Tile) and like.kind == "float" and like.dims):
            raise Unsupported(where, f"summarized loop state {name!r} must be a float tile")
        dims = []
        for size, _ in like.dims:
            if size == 1:
                dims.append((1, None))
            else:
                dims.append((size, prog.ex.fresh("lane", 0, size).terms[0][0]))
        row = dims[0][1]
        if row is None or dims[0][0] not in self.rows:
            raise Unsupported(where, f"loop state {name!r}: first axis must be the tile rows")
        cols = tuple(Lin(((k, 1),), 0) for _, k in dims[1:] if k is not None)
        ctx = tuple(c.var for c in rec.ctx) if tag == "final" else ()
        mine = Term("state", (name, tag, rec.canon, *ctx, *cols), like.dtype)
        rowvar = Lin(((row, 1),), 0)
        other = Term("state", (name, f"{tag}-other@{self.name}", rec.canon, *ctx, rowvar,
                               *cols), like.dtype)  # fmt: skip
        cond = T.c_and(T.cmp("==", rowvar, self.rstar), self._prog_cond(prog))
        return Tile("float", tuple(dims), T.ite(cond, mine, other), like.dtype)


def _proved(s: z3.Solver, f) -> bool:
    """``f`` holds under the solver's assertions."""
    s.push()
    s.add(z3.Not(f))
    res = check(s)
    s.pop()
    return res == z3.unsat


def _reach(ex: Execution, keys: set) -> set:
    """The variables ``keys`` depend on through the execution's facts (a reduction's result is
    a fresh variable defined by facts over the program's lanes and ids); the launch's own
    integers (grid sizes, strides) are the same for every program and do not propagate."""
    stop = _launch_vars(ex)
    facts = [{T.atom_key(v) for v in T.z3_vars(f)} for f in ex.facts]
    out, todo = set(keys), [k for k in keys if k not in stop]
    while todo:
        k = todo.pop()
        for fv in facts:
            if k in fv:
                for x in fv - out:
                    out.add(x)
                    if x not in stop:
                        todo.append(x)
    return out


def _vars(x: Lin) -> set:
    out = set()
    for k, _ in x.terms:
        out |= {T.atom_key(v) for v in T.z3_vars(T.atom(k))}
    return out


def _cond_vars(c) -> set:
    return set() if isinstance(c, bool) else {T.atom_key(v) for v in T.z3_vars(T.cond_z3(c))}


def _apps(x: Lin, decl: str, arity: int = 1) -> list:
    """The applications of the function ``decl`` (of ``arity`` arguments) inside ``x``."""
    out, seen = [], set()
    stack = [T.atom(k) for k, _ in x.terms]
    while stack:
        e = stack.pop()
        if e.get_id() in seen:
            continue
        seen.add(e.get_id())
        if z3.is_app(e) and e.decl().name() == decl and e.num_args() == arity:
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
    D, H, KV = spec.head_dim, spec.heads_lin(), spec.kv_lin()
    base = [t >= 0, h >= 0, h < H.z3(), dd >= 0, dd < D]
    if spec.kv_class:
        base += [KV.z3() >= spec.kv_class[0], KV.z3() <= spec.kv_class[1]]
    sides, exs = {}, {}
    for name, sd in (("L", spec.left), ("R", spec.right)):
        side = _Side(name, spec, sd, shared, src)
        ex = Execution(name, src, calls(name, spec, sd))
        ex.loop_hook, ex.read_hook = side.loop, side.read
        ex.int_reduce_facts = side.int_reduce_facts
        ex.exact_int_reduce = sd.launch == SPLIT  # decode programs: last is the position
        ex.call_hook = lambda ci, call, pv, side=side, ex=ex: side.call_hook(ex, ci, call, pv)
        ex.focus_lanes = dict.fromkeys(side.rows, side.rstar)
        ex.rules = EXEC_RULES
        ex.opaque_mul = True
        ex.int32 = []  # every int32 + - *: proved in range at the deployment bounds
        rs = side.rstar.z3()
        v = lambda n, name=name: z3.Int(f"{name}.{n}")  # noqa: E731
        ex.facts += [v("grid_hkv") == KV.z3(), rs >= 0, rs < sd.block_m,
                     side.stride.z3() >= 1, side.hk.z3() >= 0, side.hk.z3() < KV.z3()]  # fmt: skip
        if spec.kv_class:
            ex.facts += [KV.z3() >= spec.kv_class[0], KV.z3() <= spec.kv_class[1]]
        if sd.launch == PAGED:
            ex.facts.append(v("programs") >= 1)
        else:
            ex.facts += [v("requests") >= 1, v("splits") >= 1, side.max_spans.z3() >= 1,
                         side.tok.z3() < v("requests")]  # fmt: skip
        ex.run()
        if ex.paths != len(ex.calls):
            raise Unsupported(spec.kernel_file, f"{ex.paths} paths of {len(ex.calls)} kernel "
                              "call(s) (one each expected)")  # fmt: skip
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
        target = spec.times_heads(side.tok, H).add(shared["h"]).scale(D).add(Lin.var(dd))
        base += _active(st, sub, target)
        if spec.kv_class:  # imul(tok, H) + h = imul(tok', H) + h' with h, h' < H: tok = tok'
            base += _mul_lemmas([target, T.subst_lin(st.offset, sub)])
        stores[name] = (st, sub)

    s = z3.Solver()
    s.add(*base)
    if check(s) == z3.unsat:
        raise Unsupported("goal", "the executions' facts are inconsistent (vacuous proof)")
    stats["int32_obligations"] = sum(
        check_int32(
            exs[n], ATTENTION_BOUNDS, sd.page, spec.span, spec.kv_class or spec.kv_heads, n, Refuted
        )  # fmt: skip
        for n, sd in (("L", spec.left), ("R", spec.right))
    )
    _no_loop_vars(base, sides)
    for name in ("L", "R"):
        _scratch_injective(exs[name], sides[name], spec)
    dl = Lin.var(dd)
    compared = 0

    def cmp(a, b, facts, label):
        nonlocal compared
        compared += 1
        try:
            _compare(_V(a, label), _V(b, label), facts, label, rules=RULES)
        except Refuted as r:
            r.cex["obligation"] = label
            raise

    def nonvacuous(facts, label):
        s = z3.Solver()
        s.set("timeout", 60000)
        s.add(*facts)
        if check(s) != z3.sat:
            raise Unsupported("goal", f"{label}: the obligation's facts are inconsistent "
                              "(a vacuous step)")  # fmt: skip

    rl, rr = sides["L"].rstar, sides["R"].rstar
    pairs = _pairs(sides["L"], sides["R"])
    for lp, rp in pairs:
        names = lp.names
        if names != rp.names:
            raise Unsupported(rp.where, f"the two executions carry different loop state: "
                              f"{lp.names} at {lp.where}, {rp.names} at {rp.where}")  # fmt: skip
        sig = {rp.var.terms[0][0]: lp.var}
        ctx = []
        for lc, rc in zip(lp.ctx, rp.ctx, strict=True):
            sig[rc.var.terms[0][0]] = lc.var
        for lc, rc in zip(lp.ctx, rp.ctx, strict=True):
            ctx += lc.runs() + [_subst_z3(f, sig) for f in rc.runs()]
        runs_l = lp.runs()
        runs_r = [_subst_z3(f, sig) for f in rp.runs()]

        def state(lp, which, rst, sub=None, names=names):
            # the carried values of the compared row, as one term (one comparison shares the
            # subterms of m, l and acc: the running max, the scores)
            vals = getattr(lp, which)  # tiles, or the row's terms already (`_trip`)
            v = Term("loop-state", tuple(vals[x] if isinstance(vals[x], Term)
                                         else _row_value(vals[x], rst, dl) for x in names),
                     "fp32")  # fmt: skip
            return T.subst_term(v, sub) if sub else v

        trips = spec.trips.get(rp.key[:2], 1)
        if trips > 1:  # one R trip against `trips` L iterations: the L side as their block
            runs_l = [_subst_z3(f, {lp.var.terms[0][0]: lp.var.scale(trips)}) for f in runs_l]
            lp = _trip(lp, trips, rl, dl, names)
        label = f"{lp.canon} ~ {_canon(rp.key)} ({lp.where} ~ {rp.where}), state {names}"
        # 1. base: the state before the loop
        nonvacuous([*base, *ctx], f"{label}: base")
        cmp(state(lp, "init", rl), state(rp, "init", rr, sig), [*base, *ctx],
            f"loop {label}: before the first iteration")  # fmt: skip
        # 2. step: an iteration both run updates the state the same way
        step = [*base, *ctx, *runs_l, *runs_r]
        nonvacuous(step, f"{label}: step")
        cmp(state(lp, "post", rl), state(rp, "post", rr, sig), step,
            f"loop {label}: update by an iteration both run")  # fmt: skip
        # 3. frame: an iteration only one execution runs leaves the row's state unchanged
        cmp(state(lp, "post", rl), state(lp, "pre", rl),
            [*base, *ctx, *runs_l, z3.Not(z3.And(runs_r))],
            f"L: loop {label}: an iteration only L runs")  # fmt: skip
        cmp(state(rp, "post", rr, sig), state(rp, "pre", rr, sig),
            [*base, *ctx, *runs_r, z3.Not(z3.And(runs_l))],
            f"R: loop {label}: an iteration only R runs")  # fmt: skip
    # the stored values, with the loops' results as the shared final states
    (sl, subl), (sr, subr) = stores["L"], stores["R"]
    cmp(T.subst_term(sl.value, subl), T.subst_term(sr.value, subr), base, "o")
    stats["compared"] = compared
    stats["loops"] = [f"{lp.canon}~{_canon(rp.key)}" for lp, rp in pairs]
    stats["layout_reductions"] = sorted({repr(x) for x in exs["L"].layouts | exs["R"].layouts})


def _pairs(L: _Side, R: _Side) -> list[tuple[_Loop, _Loop]]:
    """The folds of L paired with those of R (by the loop each R loop is paired with), with
    their enclosing loops paired level by level; every fold has exactly one counterpart."""
    folds_l = [x for x in L.loops if x.kind == "fold"]
    folds_r = [x for x in R.loops if x.kind == "fold"]
    out = []
    for lp in folds_l:
        cands = [rp for rp in folds_r if rp.canon == lp.canon]
        if len(cands) != 1:
            raise Unsupported(lp.where, f"loop {lp.canon}: {len(cands)} counterparts in R "
                              "(one expected)")  # fmt: skip
        rp = cands[0]
        same = len(lp.ctx) == len(rp.ctx)
        if not same or any(a.canon != b.canon for a, b in zip(lp.ctx, rp.ctx, strict=True)):
            raise Unsupported(rp.where, f"loop {lp.canon}: the enclosing loops differ between "
                              "the executions")  # fmt: skip
        out.append((lp, rp))
    for rp in folds_r:
        if not any(rp is b for _, b in out):
            raise Unsupported(rp.where, f"loop {_canon(rp.key)} has no counterpart in L")
    return out


def _trip(lp: _Loop, trips: int, rst: Lin, dd: Lin, names: list) -> _Loop:
    """L's fold seen ``trips`` iterations at a time: its iteration j stands for iterations
    trips * j .. trips * j + trips - 1, each the update of the loop's body from the state the
    one before left, applied while it runs (an iteration past the loop's end leaves the
    state as it is). The compared row's pre / post states as [rows, cols] tiles of one row
    (``rst``) and column (``dd``), what `state` reads."""
    jk = lp.var.terms[0][0]
    pre = {x: _row_value(lp.pre[x], rst, dd) for x in names}
    cur = dict(pre)
    for u in range(trips):
        j = lp.var.scale(trips).add(T.const(u))
        value = lp.start.add(T.mul(j, lp.step))
        runs = T.c_and(T.cmp(">=", j, T.ZERO), T.cmp("<", value, lp.stop))
        step = {x: _replace_pre(T.subst_term(_row_value(lp.post[x], rst, dd), {jk: j}),
                                lp.canon, cur, dd) for x in names}  # fmt: skip
        cur = {x: T.ite(runs, step[x], cur[x]) for x in names}
    return replace(lp, pre=pre, post=cur)


def _replace_pre(t: Term, canon: str, state: dict, dd: Lin) -> Term:
    """``t`` with the loop's shared pre-state symbols of the compared row (`_Side._state`:
    ``state(name, "pre", canon, *cols)``) replaced by ``state[name]`` at those columns."""

    def leaf(cur: Term) -> Term | None:
        if cur.op != "state" or cur.args[1] != "pre" or cur.args[2] != canon:
            return None
        cols, value = cur.args[3:], state[cur.args[0]]
        return T.subst_term(value, {dd.terms[0][0]: cols[0]}) if cols else value

    return _replace(t, {}, leaf)


def _subst_z3(f, sig: dict):
    if not sig:
        return f
    return z3.substitute(f, *[(T.atom(k), v.z3()) for k, v in sig.items()])


def _no_loop_vars(facts: list, sides: dict) -> None:
    """The executions' facts do not mention a loop variable (its iterations' facts are
    local to each obligation)."""
    keys = {rec.var.terms[0][0] for s in sides.values() for rec in s.loops}
    for f in facts:
        if keys & {T.atom_key(v) for v in T.z3_vars(f)}:
            raise Unsupported("goal", f"a fact of the executions mentions a loop index: {f}")


def _scratch_injective(ex: Execution, side: _Side, spec: AttentionSpec) -> None:
    """No two (program, lane, span) of a kernel call store one element of an array that a
    later call reads (the split kernel's scratch), so such a read sees the one writer its
    resolution found. A bound of a write variable that is the program's own value (a span
    below ``last // SPAN + 1``) is replaced by ``max_spans`` where the facts give that bound
    (precondition `split-metadata`); other constraints on the program's own values are
    dropped (fewer constraints: a stronger claim). A product of two runtime integers
    (``imul``) is monotone in each argument."""
    launch = _launch_vars(ex)
    read_later = {(ld.array, ld.call) for ld in ex.loads}
    for st in ex.stores:
        if not any(a == st.array and c > st.call for a, c in read_later):
            continue
        wv = set(st.wvars)
        ranges = {}
        for k, (lo, hi) in st.ranges.items():
            if (_vars(lo) | _vars(hi)) <= launch:
                ranges[k] = (lo, hi)
                continue
            s = z3.Solver()
            s.set("timeout", 60000)
            s.add(*ex.facts, *[T.cond_z3(c) for c in st.path])
            s.add(hi.z3() > side.max_spans.z3())
            if not _vars(lo) <= launch or check(s) != z3.unsat:
                raise Unsupported(st.where, f"store of {st.array} read by a later call: the "
                                  f"bound {hi} of a write variable may exceed max_spans")  # fmt: skip
            ranges[k] = (lo, side.max_spans)
        a = {k: ex.fresh("ua") for k in st.wvars}
        b = {k: ex.fresh("ub") for k in st.wvars}
        facts = []
        for sub in (a, b):
            for k, (lo, hi) in ranges.items():
                x = sub[k].z3()
                facts += [x >= T.subst_lin(lo, sub).z3(), x < T.subst_lin(hi, sub).z3()]
            if _cond_vars(st.mask) <= wv | launch:
                facts.append(T.cond_z3(T.subst_cond(st.mask, sub)))
        if not _vars(st.offset) <= wv | launch:
            raise Unsupported(st.where, f"store of {st.array} read by a later call: its offset "
                              "depends on a program's own value")  # fmt: skip
        oa, ob = T.subst_lin(st.offset, a), T.subst_lin(st.offset, b)
        facts.append(oa.z3() == ob.z3())
        facts.append(z3.Or([a[k].z3() != b[k].z3() for k in st.wvars]))
        s = z3.Solver()
        s.set("timeout", 60000)
        s.add(*_launch_facts(ex), *facts, *_mul_lemmas([oa, ob]))
        res = check(s)
        if res != z3.unsat:
            raise Unsupported(st.where, f"store of {st.array} read by a later call: two "
                              f"writers of one element are not excluded (solver {res})")  # fmt: skip


def _launch_vars(ex: Execution) -> set:
    """Atom keys of the launch's own integers (grid sizes, strides, max_spans)."""
    out = set()
    for call in ex.calls:
        for g in call.grid:
            if isinstance(g, Lin):
                out |= _vars(g)
        for v in call.args.values():
            if isinstance(v, Lin):
                out |= _vars(v)
    return out


def _launch_facts(ex: Execution) -> list:
    """The execution's facts that only mention the launch's own integers."""
    keys = _launch_vars(ex)
    return [f for f in ex.facts if {T.atom_key(v) for v in T.z3_vars(f)} <= keys]


def _mul_lemmas(lins: list) -> list:
    """Instances of monotonicity for the products of two runtime integers in ``lins``:
    ``a >= b + 1 and n >= 0  =>  imul(a, n) >= imul(b, n) + n`` (either argument)."""
    apps = []
    seen = set()
    stack = [T.atom(k) for x in lins for k, _ in x.terms]
    while stack:
        e = stack.pop()
        if e.get_id() in seen:
            continue
        seen.add(e.get_id())
        if z3.is_app(e) and e.decl().name() == "imul" and e.num_args() == 2:
            apps.append(e)
        stack.extend(e.children())
    out = []
    for i, x in enumerate(apps):
        for y in apps[i + 1 :]:
            for p in (0, 1):
                n, a, b = x.arg(1 - p), x.arg(p), y.arg(p)
                if not n.eq(y.arg(1 - p)):
                    continue
                out += [z3.Implies(z3.And(a >= b + 1, n >= 0), x >= y + n),
                        z3.Implies(z3.And(b >= a + 1, n >= 0), y >= x + n)]  # fmt: skip
    return out


def _pid_keys(st: Store) -> set:
    return {x.terms[0][0] for x in st.pids if not x.is_const()}
