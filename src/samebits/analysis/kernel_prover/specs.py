"""The deployed specializations and their goals (the prover's annotation of the kernels).

Goals are stated here, next to the launch code they describe, in one form: a :class:`Goal`
(batch invariance or launch equivalence), the arrays it relates, and the kernel calls of each
side with their constexpr values and grids, built from the same functions the engine uses
(``split_plan``, ``choose_launch``, ``LAUNCH_TABLE``, ``row_num_warps``, the wrappers'
constants). The kernel *source* is read from a file, so a mutated copy can be proved instead.
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from samebits.analysis.kernel_prover import terms as T
from samebits.analysis.kernel_prover.prover import BATCH, LAUNCH, Goal, shape_symbol
from samebits.analysis.kernel_prover.symbolic.values import (
    ArrayArg,
    CDiv,
    DescArg,
    FloatArg,
    KernelCall,
)
from samebits.analysis.kernel_prover.terms import Lin
from samebits.kernels.triton.certified import units as _units
from samebits.model.presets import PRESETS

# The prover's models (`--models`, attention.py's too): its name -> the preset whose dimensions
# it proves (`units.dims_of`): Llama-3-8B and the tests' tiny model (tests/tiny_models.py, the
# qwen3 one: q/k norms; all_specs adds the qkv bias of its qwen2 sibling).
MODEL_PRESETS = {"llama-3-8b": "llama-3-8b", "tiny": "tiny-test-qwen3"}
MODELS: dict[str, dict] = {name: _units.dims_of(PRESETS[p]) for name, p in MODEL_PRESETS.items()}
ACT = "bf16"
# the roles whose linear writes float32 (samebits.kernels.interface.FLOAT32_ROLES, named here
# without importing torch; tests/unit/test_moe_config.py checks they agree)
FLOAT32_ROLES = ("lm_head", "router")


@dataclass
class Spec:
    """One certified specialization: a goal between two launches."""

    name: str
    kernel_file: str  # module file the kernels live in (relative to samebits/kernels/triton)
    goal: Goal
    left: list
    right: list
    m_left: Lin
    description: dict
    # further kernel files proved against (their functions joined to kernel_file's): a fused
    # kernel's imported helpers and the op-by-op path it is proved equal to
    also_files: tuple = ()


def _m_symbol() -> Lin:
    return Lin.var(z3.Int("L.M"))


# --- linear ------------------------------------------------------------------------------


def linear_calls(
    plan, launch, m, has_bias: bool, out_dtype: str, n: Lin | None = None
) -> list[KernelCall]:
    """The kernel calls `samebits.kernels.triton.linear` makes for ``launch`` (mirrors
    `_run_ranges` / `_run_split_grid` / `_run_tma`). ``n``: a symbolic N (a shape symbol)
    instead of the plan's."""
    from samebits.kernels.triton.launches import SPLIT_GRID, TMA
    from samebits.kernels.triton.linear import ORDERED_SUM_BLOCK, ORDERED_SUM_WARPS

    x, w, y = ArrayArg("x", ACT), ArrayArg("w", ACT), ArrayArg("y", out_dtype)
    b = ArrayArg("bias", "fp32") if has_bias else y
    mm = m if isinstance(m, Lin) else Lin((), m)
    nn = plan.n if n is None else n
    gm = CDiv(mm, launch.block_m)
    gn = _n_tiles(nn, launch.block_n)
    tiles = dict(BLOCK_M=launch.block_m, BLOCK_N=launch.block_n, BLOCK_K=plan.block_k)
    if launch.kind == TMA:
        return [_tma_call(plan, launch, mm, b, y, has_bias, tiles, n)]
    if launch.kind != SPLIT_GRID:
        args = dict(x_ptr=x, w_ptr=w, b_ptr=b, y_ptr=y, M=mm, N=nn, K=plan.k,
                    RANGE_K=plan.range_k, SPLITS=plan.splits, HAS_BIAS=has_bias, **tiles)  # fmt: skip
        return [KernelCall("linear_ranges_kernel", (gm, gn), args, launch.num_warps)]
    a2 = dict(p_ptr=PARTIALS, b_ptr=b, y_ptr=y, M=mm, N=nn, SPLITS=plan.splits,
              HAS_BIAS=has_bias, BLOCK=ORDERED_SUM_BLOCK)  # fmt: skip
    mn = mm.scale(plan.n) if n is None else T.mul(mm, n)
    return [
        partials_call(plan, launch, mm, n),
        KernelCall(
            "ordered_sum_kernel",
            (CDiv(mn, ORDERED_SUM_BLOCK),),
            a2,
            ORDERED_SUM_WARPS,
        ),  # fmt: skip
    ]


PARTIALS = ArrayArg("partials", "fp32")  # the split-K grid's [S, M, N] fp32 partials


def _n_tiles(n, block: int):
    """The grid's n-tile count: ``cdiv(n, block)`` (a bounded fresh integer for a symbolic n)."""
    return CDiv(n, block) if isinstance(n, Lin) else -(-n // block)


def partials_call(plan, launch, mm: Lin, n: Lin | None = None) -> KernelCall:
    """`linear.split_partials`' call (the split-K grid's first kernel): x [M, K] and w [N, K]
    into ``PARTIALS``, grid (m-tiles, n-tiles, S)."""
    nn = plan.n if n is None else n
    tiles = dict(BLOCK_M=launch.block_m, BLOCK_N=launch.block_n, BLOCK_K=plan.block_k)
    args = dict(x_ptr=ArrayArg("x", ACT), w_ptr=ArrayArg("w", ACT), p_ptr=PARTIALS, M=mm,
                N=nn, K=plan.k, RANGE_K=plan.range_k, **tiles)  # fmt: skip
    grid = (CDiv(mm, launch.block_m), _n_tiles(nn, launch.block_n), plan.splits)
    return KernelCall("linear_partials_kernel", grid, args, launch.num_warps)


def _tma_call(
    plan, launch, mm: Lin, b, y, has_bias: bool, tiles: dict, n: Lin | None = None
) -> KernelCall:
    """`_run_tma`'s call: descriptors over x [M, K] and w [N, K], grid (group, m-tiles, groups).
    A symbolic ``n`` takes the plan's N for GROUP_N (`tma_grid`: equal for every N of the
    class, whose lower bound the caller states) and ``cdiv(n, GROUP_N * BLOCK_N)`` groups."""
    from samebits.kernels.triton.linear import tma_grid

    group, _, groups = tma_grid(plan.n, 1, launch)
    if n is not None:
        groups = CDiv(n, group * launch.block_n)
    nn = plan.n if n is None else n
    x = DescArg("x", ACT, mm, plan.k, (launch.block_m, plan.block_k))
    w = DescArg("w", ACT, nn, plan.k, (launch.block_n, plan.block_k))
    args = dict(x_desc=x, w_desc=w, b_ptr=b, y_ptr=y, M=mm, N=nn, K=plan.k,
                RANGE_K=plan.range_k, SPLITS=plan.splits, HAS_BIAS=has_bias, GROUP_N=group,
                **tiles)  # fmt: skip
    grid = (group, CDiv(mm, launch.block_m), groups)
    # the group axes (of more than one program) are symbolic even when small: one path covers
    # every weight tile instead of one path per group
    wide = tuple(
        ax for ax, size in ((0, group), (2, groups)) if not isinstance(size, int) or size > 1
    )
    return KernelCall("linear_tma_kernel", grid, args, launch.num_warps, symbolic_axes=wide)


plan_launches = _units.plan_launches
_launch_name = _units.launch_name


def linear_specs(
    model: str, has_bias: bool = False, roles: tuple | None = None, shapes=None
) -> list[Spec]:
    """Goal 1 for every launch the plan may choose, and goal 4 between the first launch and
    every other (equality is transitive, so n - 1 proofs cover all pairs)."""
    from samebits.kernels.triton.splitplan import split_plan

    specs = []
    for role, n, k in shapes or _units.linear_shapes(MODELS[model]):
        if roles and role not in roles:
            continue
        out_dt = "fp32" if role in FLOAT32_ROLES else ACT
        plan = split_plan(n, k, role)
        launches = plan_launches(plan)
        tag = f"{model}.{role}" + (".bias" if has_bias else "")
        desc = dict(model=model, role=role, n=n, k=k, plan=repr(plan), has_bias=has_bias,
                    out_dtype=out_dt)  # fmt: skip
        for la in launches:
            m = _m_symbol()
            specs.append(
                Spec(
                    f"{tag}.batch.{_launch_name(la)}",
                    "_linear_kernels.py",
                    Goal(BATCH, {"y": n}, {"x": k}),
                    linear_calls(plan, la, m, has_bias, out_dt),
                    linear_calls(plan, la, 1, has_bias, out_dt),
                    m,
                    {**desc, "launch": repr(la), "M": "symbolic (left) vs 1 (right)"},
                )  # fmt: skip
            )
        ref = launches[0]
        for la in launches[1:]:
            m = _m_symbol()
            specs.append(
                Spec(
                    f"{tag}.equiv.{_launch_name(ref)}~{_launch_name(la)}",
                    "_linear_kernels.py",
                    Goal(LAUNCH, {"y": n}),
                    linear_calls(plan, ref, m, has_bias, out_dt),
                    linear_calls(plan, la, m, has_bias, out_dt),
                    m,
                    {**desc, "left_launch": repr(ref), "right_launch": repr(la), "M": "symbolic"},
                )  # fmt: skip
            )
    return specs


# --- row kernels -------------------------------------------------------------------------


def _next_pow2(x: int) -> int:
    return 1 << (x - 1).bit_length()


def rms_calls(
    width: int, m, add: bool, in_place: bool = False, x: ArrayArg | None = None,
    w: ArrayArg | None = None,
) -> list[KernelCall]:  # fmt: skip
    """`rows._launch_rms`' call: one program per row, BLOCK and warps from the width. ``x`` and
    ``w`` (the input rows and the norm weight) default to the row-kernel goals' arrays."""
    from samebits.kernels.triton.rows import row_num_warps

    mm = m if isinstance(m, Lin) else Lin((), m)
    block = _next_pow2(width)
    x = x or ArrayArg("x", "fp32" if add else ACT)
    out = x if in_place else ArrayArg("out", ACT)
    res = ArrayArg("res", "fp32") if add else x
    args = dict(x_ptr=x, res_ptr=res, w_ptr=w or ArrayArg("w", ACT), out_ptr=out,
                eps=FloatArg("eps"), WIDTH=width, BLOCK=block, ADD_RESIDUAL=add)  # fmt: skip
    return [KernelCall("rms_norm_kernel", (mm,), args, row_num_warps(block))]


def silu_calls(inner: int, m) -> list[KernelCall]:
    from samebits.kernels.triton.rows import SILU_BLOCK, SILU_WARPS

    mm = m if isinstance(m, Lin) else Lin((), m)
    block = min(SILU_BLOCK, _next_pow2(inner))
    args = dict(gu_ptr=ArrayArg("gu", ACT), out_ptr=ArrayArg("out", ACT), INNER=inner, BLOCK=block)
    return [KernelCall("silu_mul_kernel", (mm, -(-inner // block)), args, SILU_WARPS)]


def gelu_calls(inner: int, m) -> list[KernelCall]:
    """`rows.gelu_mul`'s launch (silu_mul's blocks and warps)."""
    from samebits.kernels.triton.rows import SILU_BLOCK, SILU_WARPS

    mm = m if isinstance(m, Lin) else Lin((), m)
    block = min(SILU_BLOCK, _next_pow2(inner))
    args = dict(gu_ptr=ArrayArg("gu", ACT), out_ptr=ArrayArg("out", ACT), INNER=inner, BLOCK=block)
    return [KernelCall("gelu_mul_kernel", (mm, -(-inner // block)), args, SILU_WARPS)]


def gelu_specs(model: str, inner: int) -> list[Spec]:
    """Goal 1 (batch invariance) of Gemma's GeGLU kernel at width `inner`."""
    m = _m_symbol()
    goal = Goal(BATCH, {"out": inner}, {"gu": 2 * inner})
    desc = {"model": model, "op": "gelu_mul", "inner": inner, "M": "symbolic (left) vs 1 (right)"}
    return [Spec(f"{model}.gelu_mul.batch", "_gelu_kernel.py", goal, gelu_calls(inner, m),
                 gelu_calls(inner, 1), m, desc, _units.ALSO_FILES["gelu"])]  # fmt: skip


def rope_calls(heads: int, d: int, m) -> list[KernelCall]:
    from samebits.kernels.triton.rows import ROPE_WARPS

    mm = m if isinstance(m, Lin) else Lin((), m)
    args = dict(x_ptr=ArrayArg("x", ACT), pos_ptr=ArrayArg("pos", "i64"),
                cos_ptr=ArrayArg("cos", "fp32"), sin_ptr=ArrayArg("sin", "fp32"), HEADS=heads,
                HALF=d // 2, BLOCK_H=_next_pow2(heads), BLOCK_D=_next_pow2(d // 2))  # fmt: skip
    return [KernelCall("rope_kernel", (mm,), args, ROPE_WARPS)]


def qkv_rope_store_calls(heads: int, kv_heads: int, d: int, m) -> list[KernelCall]:
    """`rows.qkv_rope_store`'s launch: one program per token; q row out, K/V at the slot."""
    from samebits.kernels.triton.rows import ROPE_WARPS

    mm = m if isinstance(m, Lin) else Lin((), m)
    args = dict(qkv_ptr=ArrayArg("qkv", ACT), pos_ptr=ArrayArg("pos", "i64"),
                slot_ptr=ArrayArg("slot", "i64"), cos_ptr=ArrayArg("cos", "fp32"),
                sin_ptr=ArrayArg("sin", "fp32"), q_ptr=ArrayArg("q", ACT),
                k_ptr=ArrayArg("k_cache", ACT), v_ptr=ArrayArg("v_cache", ACT), HEADS=heads,
                KV_HEADS=kv_heads, HALF=d // 2, BLOCK_H=_next_pow2(heads),
                BLOCK_KV=_next_pow2(kv_heads), BLOCK_D=_next_pow2(d // 2),
                BLOCK_V=_next_pow2(kv_heads * d))  # fmt: skip
    return [KernelCall("qkv_rope_store_kernel", (mm,), args, ROPE_WARPS)]


def qkv_rope_store_goal(kind: str, heads: int, kv_heads: int, d: int, reference: str = ""):
    """q: an ordinary row output; the K and V caches: scatter outputs at ``slot[row]``."""
    w = kv_heads * d
    rows = {"qkv": (heads + 2 * kv_heads) * d, "pos": 1, "slot": 1} if kind == BATCH else {}
    scatter = {"k_cache": ("slot", w), "v_cache": ("slot", w)}
    return Goal(kind, {"q": heads * d}, rows, scatter, reference)


def per_op_qkv_calls(heads: int, kv_heads: int, d: int, m) -> list[KernelCall]:
    """The op-by-op path the fused kernel replaces (`ops.TorchPlacement.qkv_rope_store`):
    split (contiguous q, k), `rope` of q and of k in place (`rows.rope`'s launch), `store_kv`
    (index_copy_ of k and of the v view); the torch ops are reference.py's copy kernels."""
    from samebits.kernels.triton.rows import ROPE_WARPS

    mm = m if isinstance(m, Lin) else Lin((), m)
    qw, kw = heads * d, kv_heads * d
    stride = qw + 2 * kw
    qkv, q, k = ArrayArg("qkv", ACT), ArrayArg("q", ACT), ArrayArg("k", ACT)
    slot = ArrayArg("slot", "i64")

    def copy(kernel, src, dst, offset, width, **extra):
        args = dict(src_ptr=src, dst_ptr=dst, SRC_STRIDE=stride if src is qkv else width,
                    OFFSET=offset, WIDTH=width, BLOCK=_next_pow2(width), **extra)  # fmt: skip
        return KernelCall(kernel, (mm,), args, 4)

    def rope(x, h):
        args = dict(x_ptr=x, pos_ptr=ArrayArg("pos", "i64"), cos_ptr=ArrayArg("cos", "fp32"),
                    sin_ptr=ArrayArg("sin", "fp32"), HEADS=h, HALF=d // 2,
                    BLOCK_H=_next_pow2(h), BLOCK_D=_next_pow2(d // 2))  # fmt: skip
        return KernelCall("rope_kernel", (mm,), args, ROPE_WARPS)

    return [
        copy("split_copy_kernel", qkv, q, 0, qw),
        copy("split_copy_kernel", qkv, k, qw, kw),
        rope(q, heads),
        rope(k, kv_heads),
        copy("index_copy_kernel", k, ArrayArg("k_cache", ACT), 0, kw, slot_ptr=slot),
        copy("index_copy_kernel", qkv, ArrayArg("v_cache", ACT), qw + kw, kw, slot_ptr=slot),
    ]


def qkv_rope_store_specs(model: str, heads: int, kv_heads: int, d: int) -> list[Spec]:
    """Goal 1 (batch invariance: q rows, K/V cache rows at the row's slot) and equivalence
    with the op-by-op path (split, rope_kernel of q and k, index_copy_ into the caches)."""
    desc = {"model": model, "op": "qkv_rope_store", "heads": heads, "kv_heads": kv_heads,
            "head_dim": d}  # fmt: skip
    m, m2 = _m_symbol(), _m_symbol()
    return [
        Spec(f"{model}.qkv_rope_store.batch", "_row_kernels.py",
             qkv_rope_store_goal(BATCH, heads, kv_heads, d),
             qkv_rope_store_calls(heads, kv_heads, d, m),
             qkv_rope_store_calls(heads, kv_heads, d, 1), m,
             {**desc, "M": "symbolic (left) vs 1 (right)"}),
        Spec(f"{model}.qkv_rope_store.equiv.per-op", "_row_kernels.py",
             qkv_rope_store_goal(LAUNCH, heads, kv_heads, d, "qkv-rope-store"),
             qkv_rope_store_calls(heads, kv_heads, d, m2),
             per_op_qkv_calls(heads, kv_heads, d, m2), m2,
             {**desc, "M": "symbolic", "right": "op by op: split, rope_kernel (q, k), "
              "index_copy_ (k, v) (reference.py)"}),
    ]  # fmt: skip


def row_specs(model: str, dims: dict | None = None) -> list[Spec]:
    c = dims or MODELS[model]
    h, d = c["hidden"], c["head_dim"]
    out = []

    def spec(name, goal, make, desc):
        m = _m_symbol()
        out.append(Spec(f"{model}.{name}.batch", "_row_kernels.py", goal, make(m), make(1), m,
                        {"model": model, **desc, "M": "symbolic (left) vs 1 (right)"}))  # fmt: skip

    spec("rms_norm", Goal(BATCH, {"out": h}, {"x": h}), lambda m: rms_calls(h, m, False),
         {"op": "rms_norm", "width": h})  # fmt: skip
    spec("add_rms_norm", Goal(BATCH, {"out": h, "res": h}, {"x": h, "res": h}),
         lambda m: rms_calls(h, m, True), {"op": "add_rms_norm", "width": h})  # fmt: skip
    spec("silu_mul", Goal(BATCH, {"out": c["inter"]}, {"gu": 2 * c["inter"]}),
         lambda m: silu_calls(c["inter"], m), {"op": "silu_mul", "inner": c["inter"]})  # fmt: skip
    for which, heads in (("q", c["heads"]), ("k", c["kv_heads"])):
        w = heads * d
        spec(f"rope_{which}", Goal(BATCH, {"x": w}, {"x": w, "pos": 1}),
             lambda m, heads=heads: rope_calls(heads, d, m),
             {"op": "rope", "heads": heads, "head_dim": d})  # fmt: skip
    if not c["head_norm"]:
        # the fused qkv split + RoPE + K/V store (models without q/k norms)
        out += qkv_rope_store_specs(model, c["heads"], c["kv_heads"], d)
    if c["head_norm"]:
        for which, heads in (("q", c["heads"]), ("k", c["kv_heads"])):
            # head_rms_norm: rows are (token, head) pairs, in place; the batch row is a token
            w = heads * d
            spec(f"head_rms_norm_{which}", Goal(BATCH, {"x": w}, {"x": w}),
                 lambda m, heads=heads: rms_calls(d, _times(m, heads), False, in_place=True),
                 {"op": "head_rms_norm", "heads": heads, "head_dim": d})  # fmt: skip
    return out


# --- fused linear + residual add + RMSNorm (o_proj, down_proj after a split-K grid) ------

NORM_W = ArrayArg("norm_w", ACT)  # the RMSNorm weight (the linear's weight is "w")


def sum_add_rms_calls(plan, m, has_bias: bool) -> list[KernelCall]:
    """`rows.sum_add_rms_norm`'s launch on the split-K grid's partials: one program per row,
    BLOCK = next_pow2(N), warps `row_num_warps(BLOCK)`, ``b_ptr`` the partials without bias."""
    from samebits.kernels.triton.rows import row_num_warps

    mm = m if isinstance(m, Lin) else Lin((), m)
    block = _next_pow2(plan.n)
    args = dict(p_ptr=PARTIALS, b_ptr=ArrayArg("bias", "fp32") if has_bias else PARTIALS,
                res_ptr=ArrayArg("res", "fp32"), w_ptr=NORM_W, out_ptr=ArrayArg("out", ACT),
                M=mm, eps=FloatArg("eps"), SPLITS=plan.splits, HAS_BIAS=has_bias, WIDTH=plan.n,
                BLOCK=block)  # fmt: skip
    return [KernelCall("sum_add_rms_norm_kernel", (mm,), args, row_num_warps(block))]


def fused_calls(plan, launch, m, has_bias: bool) -> list[KernelCall]:
    """`TritonOps.linear_add_rms_norm` where M's launch is the split-K grid: the grid's
    partials (`linear.split_partials`), then `rows.sum_add_rms_norm`."""
    mm = m if isinstance(m, Lin) else Lin((), m)
    return [partials_call(plan, launch, mm), *sum_add_rms_calls(plan, mm, has_bias)]


def per_op_linear_add_rms_calls(plan, launch, m, has_bias: bool) -> list[KernelCall]:
    """The op-by-op path the fused launch replaces: the split-K grid's two kernels
    (`linear_calls`: partials, `ordered_sum_kernel` into y) and `rows.add_rms_norm` of y."""
    y = ArrayArg("y", ACT)
    return [*linear_calls(plan, launch, m, has_bias, y.dtype),
            *rms_calls(plan.n, m, True, x=y, w=NORM_W)]  # fmt: skip


def linear_add_rms_specs(
    model: str, role: str, n: int, k: int, has_bias: bool = False
) -> list[Spec]:
    """For every split-K grid launch the plan may choose (`units.grid_launches`): goal 1 of
    the fused launch (rows: x and the residual; outputs: out and the residual) and its
    equivalence with the op-by-op path (same inputs, same symbolic M)."""
    from samebits.kernels.triton.splitplan import split_plan

    plan = split_plan(n, k, role)
    tag = f"{model}.linear_add_rms_norm.{role}" + (".bias" if has_bias else "")
    desc = dict(model=model, op="linear_add_rms_norm", role=role, n=n, k=k, plan=repr(plan),
                has_bias=has_bias)  # fmt: skip
    outputs = {"out": n, "res": n}
    kfile, also = _units.KERNEL_FILES["fused"], _units.ALSO_FILES["fused"]
    specs = []
    for la in _units.grid_launches(plan):
        m, m2 = _m_symbol(), _m_symbol()
        d = {**desc, "launch": repr(la)}
        specs += [
            Spec(f"{tag}.batch.{_launch_name(la)}", kfile, Goal(BATCH, outputs, {"x": k, "res": n}),
                 fused_calls(plan, la, m, has_bias), fused_calls(plan, la, 1, has_bias), m,
                 {**d, "M": "symbolic (left) vs 1 (right)"}, also),
            Spec(f"{tag}.equiv.{_launch_name(la)}~per-op", kfile, Goal(LAUNCH, outputs),
                 fused_calls(plan, la, m2, has_bias),
                 per_op_linear_add_rms_calls(plan, la, m2, has_bias), m2,
                 {**d, "M": "symbolic", "right": "op by op: linear_partials_kernel, "
                  "ordered_sum_kernel, rms_norm_kernel (ADD_RESIDUAL)"}, also),
        ]  # fmt: skip
    return specs


def _times(m, k: int):
    return m.scale(k) if isinstance(m, Lin) else m * k


def all_specs(models=("tiny", "llama-3-8b"), kinds=("linear", "rows")) -> list:
    from samebits.analysis.kernel_prover.attention import attention_specs

    out = []
    for model in models:
        if "linear" in kinds:
            out += linear_specs(model)
            if model == "tiny":
                out += linear_specs(model, has_bias=True, roles=("qkv",))
        if "rows" in kinds:
            out += row_specs(model)
        if "attention" in kinds:
            out += attention_specs(model)
        if "fused" in kinds:
            for u in _units.fused_units({"bias": False}, _units.linear_shapes(MODELS[model])):
                out += linear_add_rms_specs(model, u["role"], u["n"], u["k"])
    return out


def unit_specs(unit: dict) -> list:
    """The specializations of one certification unit (see units.py), named after it."""
    from samebits.analysis.kernel_prover.attention import attention_specs

    key = unit["key"]
    if unit["kind"] == "linear":
        prefix = f"u.{unit['role']}" + (".bias" if unit["bias"] else "")
        specs = linear_specs("u", unit["bias"], shapes=[(unit["role"], unit["n"], unit["k"])])
    elif unit["kind"] == "fused":
        prefix = f"u.linear_add_rms_norm.{unit['role']}" + (".bias" if unit["bias"] else "")
        specs = linear_add_rms_specs("u", unit["role"], unit["n"], unit["k"], unit["bias"])
    elif unit["kind"] == "moe":
        from samebits.analysis.kernel_prover.moe import grouped_specs

        prefix = "u"
        specs = grouped_specs("u", unit["role"], unit["n"], unit["k"])
        key = f"moe.{unit['role']}.{unit['n']}x{unit['k']}"
    elif unit["kind"] == "moe_combine":
        from samebits.analysis.kernel_prover.moe import combine_specs

        prefix = "u"
        specs = combine_specs("u", unit["top_k"], unit["hidden"])
        key = f"moe.k{unit['top_k']}.h{unit['hidden']}"
    elif unit["kind"] == "moe_router":
        from samebits.analysis.kernel_prover.moe import router_specs

        prefix = "u.router"
        specs = router_specs("u", unit["experts"], unit["top_k"], unit["normalize"])
    elif unit["kind"] == "gelu":
        prefix = "u.gelu_mul.batch"
        specs = gelu_specs("u", unit["inner"])
        key = f"{key}.batch"
    elif unit["kind"] == "rows" and unit["op"] == "qkv_rope_store":
        prefix = "u.qkv_rope_store"
        specs = qkv_rope_store_specs("u", unit["heads"], unit["kv_heads"], unit["head_dim"])
    elif unit["kind"] == "rows":
        op = unit["op"]
        w = unit.get("width") or unit.get("head_dim") or 0
        heads = unit.get("heads", 1)
        dims = dict(hidden=w, inter=unit.get("inner", 2), heads=heads, kv_heads=heads,
                    head_dim=unit.get("head_dim", 2), head_norm=op == "head_rms_norm")  # fmt: skip
        name = {"rope": "rope_q", "head_rms_norm": "head_rms_norm_q"}.get(op, op)
        prefix = f"u.{name}.batch"
        specs = [sp for sp in row_specs("u", dims) if sp.name == prefix]
        key = f"{key}.batch"
    else:
        from samebits.analysis.kernel_prover.attention import SPLIT

        prefix = "u.attention"
        dims = dict(heads=unit["heads"], kv_heads=unit["kv_heads"], head_dim=unit["head_dim"])
        split = unit.get("launch") == "split"
        specs = [sp for sp in attention_specs("u", dims) if (sp.right.launch == SPLIT) == split]
    for sp in specs:
        assert sp.name.startswith(prefix), (sp.name, prefix)
        sp.name = key + sp.name[len(prefix) :]
        sp.description = {**sp.description, "unit": unit["key"]}
    return specs


# --- symbolic-shape units (units.symbolic_unit): one proof set per shape class ------------

# the class proofs also prove every int32 index operation in range, for launches of up to
# units.M_MAX rows (the step's tokens; the scheduler's max_num_batched_tokens is far below)
_INT32 = {"M": _units.M_MAX}


def symbolic_linear_specs(sym: dict) -> list[Spec]:
    """`linear_specs` of the class's plan with N a shape symbol bounded by the class
    (``units.linear_n_class``): goal 1 for every launch, goal 4 from the first to each other."""
    plan = _units.class_plan(sym)
    n = shape_symbol("N")
    shape = {"N": (sym["lo"], sym["hi"])}
    out_dt, bias = sym["out_dtype"], sym["bias"]
    launches = plan_launches(plan)
    desc = dict(unit=sym["key"], n=f"symbolic, {sym['lo']} <= N <= {sym['hi']}", k=plan.k,
                splits=plan.splits, block_k=plan.block_k, range_k=plan.range_k, has_bias=bias,
                out_dtype=out_dt)  # fmt: skip
    specs = []
    for la in launches:
        m = _m_symbol()
        specs.append(Spec(f"{sym['key']}.batch.{_launch_name(la)}", "_linear_kernels.py",
                          Goal(BATCH, {"y": "N"}, {"x": plan.k}, shape=shape, int32=_INT32),
                          linear_calls(plan, la, m, bias, out_dt, n),
                          linear_calls(plan, la, 1, bias, out_dt, n), m,
                          {**desc, "launch": repr(la), "M": "symbolic (left) vs 1 (right)"}))  # fmt: skip
    ref = launches[0]
    for la in launches[1:]:
        m = _m_symbol()
        specs.append(Spec(f"{sym['key']}.equiv.{_launch_name(ref)}~{_launch_name(la)}",
                          "_linear_kernels.py", Goal(LAUNCH, {"y": "N"}, shape=shape, int32=_INT32),
                          linear_calls(plan, ref, m, bias, out_dt, n),
                          linear_calls(plan, la, m, bias, out_dt, n), m,
                          {**desc, "left_launch": repr(ref), "right_launch": repr(la),
                           "M": "symbolic"}))  # fmt: skip
    return specs


@dataclass(frozen=True)
class KPlan:
    """A K class's plan as the calls read it: ``k`` and ``range_k`` symbolic (``Lin``),
    ``n`` the class's lower bound (the TMA group; the calls take the symbolic N)."""

    n: int
    k: Lin
    splits: int
    block_k: int
    range_k: Lin


def k_class_plan(sym: dict) -> tuple[KPlan, dict, str]:
    """The K class's symbolic plan, its shape bounds and x's row width (``units.k_class_bounds``:
    RANGE_K = 64 * STEPS; K = S * RANGE_K, or RANGE_K - PAD for S = 1)."""
    splits, bk = sym["splits"], _units.K_BLOCK
    rk = shape_symbol("STEPS").scale(bk)
    if splits > 1:
        k, width = rk.scale(splits), f"{splits * bk}*STEPS"
    else:
        k, width = rk.add(shape_symbol("PAD"), -1), f"{bk}*STEPS+-1*PAD"
    bounds = {name: tuple(b) for name, b in _units.class_bounds(sym).items()}
    return KPlan(sym["lo"], k, splits, bk, rk), bounds, width


def symbolic_k_linear_specs(sym: dict) -> list[Spec]:
    """`symbolic_linear_specs` with K symbolic too (a K class): the k loop is summarized by
    induction (`Goal.fold`); goal 1 for every launch, goal 4 from the first to each other."""
    plan = _units.class_plan(sym)
    kp, shape, width = k_class_plan(sym)
    n = shape_symbol("N")
    out_dt, bias = sym["out_dtype"], sym["bias"]
    launches = plan_launches(plan)
    desc = dict(unit=sym["key"], n=f"symbolic, {sym['lo']} <= N <= {sym['hi']}",
                k=f"symbolic: {width} ({shape})", splits=kp.splits, block_k=kp.block_k,
                range_k="64*STEPS", has_bias=bias, out_dtype=out_dt)  # fmt: skip
    specs = []
    for la in launches:
        m = _m_symbol()
        goal = Goal(BATCH, {"y": "N"}, {"x": width}, shape=shape, int32=_INT32, fold=True)
        specs.append(Spec(f"{sym['key']}.batch.{_launch_name(la)}", "_linear_kernels.py", goal,
                          linear_calls(kp, la, m, bias, out_dt, n),
                          linear_calls(kp, la, 1, bias, out_dt, n), m,
                          {**desc, "launch": repr(la), "M": "symbolic (left) vs 1 (right)"}))  # fmt: skip
    ref = launches[0]
    for la in launches[1:]:
        m = _m_symbol()
        goal = Goal(LAUNCH, {"y": "N"}, shape=shape, int32=_INT32, fold=True)
        specs.append(Spec(f"{sym['key']}.equiv.{_launch_name(ref)}~{_launch_name(la)}",
                          "_linear_kernels.py", goal,
                          linear_calls(kp, ref, m, bias, out_dt, n),
                          linear_calls(kp, la, m, bias, out_dt, n), m,
                          {**desc, "left_launch": repr(ref), "right_launch": repr(la),
                           "M": "symbolic"}))  # fmt: skip
    return specs


def symbolic_row_specs(sym: dict) -> list[Spec]:
    """Goal 1 of a row kernel with its width a shape symbol bounded by the class
    (``units.width_class``): every width of the class launches the same BLOCK and warps."""
    if sym["op"] in _units.HEAD_CLASS_OPS:
        return symbolic_head_specs(sym)
    w = shape_symbol("WIDTH")
    shape = {"WIDTH": (sym["lo"], sym["hi"])}
    op, block = sym["op"], sym["block"]
    kfile = _units.KERNEL_FILES[sym["kind"]]
    if op in ("silu_mul", "gelu_mul"):
        goal = Goal(BATCH, {"out": "WIDTH"}, {"gu": "2*WIDTH"}, shape=shape, int32=_INT32)
        make = lambda m: _sym_gated_calls(op, block, w, m)  # noqa: E731
    else:
        add = op == "add_rms_norm"
        cols = {"out": "WIDTH", "res": "WIDTH"} if add else {"out": "WIDTH"}
        rows = {"x": "WIDTH", "res": "WIDTH"} if add else {"x": "WIDTH"}
        goal = Goal(BATCH, cols, rows, shape=shape, int32=_INT32)
        make = lambda m: _with_args(rms_calls(block, m, add), WIDTH=w)  # noqa: E731
    m = _m_symbol()
    desc = {"unit": sym["key"], "op": op, "width": f"symbolic, {sym['lo']}..{sym['hi']}",
            "block": block, "M": "symbolic (left) vs 1 (right)"}  # fmt: skip
    also = _units.ALSO_FILES.get(sym["kind"], ())
    return [Spec(f"{sym['key']}.batch", kfile, goal, make(m), make(1), m, desc, also)]


def symbolic_head_specs(sym: dict) -> list[Spec]:
    """A head class (``units.head_class``): the specs of `row_specs` / `qkv_rope_store_specs`
    with the head count the shape symbol HEADS (the kernels' constexpr HEADS, the widths of
    the goal's rows ``head_dim * HEADS``), bounded by the class; head_dim (and kv_heads) fixed."""
    op, d, hs = sym["op"], sym["head_dim"], shape_symbol("HEADS")
    shape = {"HEADS": (sym["lo"], sym["hi"])}
    w = f"{d}*HEADS"
    desc = {"unit": sym["key"], "op": op, "heads": f"symbolic, {sym['lo']}..{sym['hi']}",
            "head_dim": d}  # fmt: skip
    if op == "qkv_rope_store":
        return _sym_qkv_specs(sym, hs, shape, desc)
    if op == "rope":
        goal = Goal(BATCH, {"x": w}, {"x": w, "pos": 1}, shape=shape, int32=_INT32)
        make = lambda m: _with_args(rope_calls(sym["block_h"], d, m), HEADS=hs)  # noqa: E731
    else:  # head_rms_norm: rows are (token, head) pairs, in place; the batch row is a token
        goal = Goal(BATCH, {"x": w}, {"x": w}, shape=shape, int32=_INT32)
        make = lambda m: rms_calls(d, _sym_times(m, hs), False, in_place=True)  # noqa: E731
    m = _m_symbol()
    return [Spec(f"{sym['key']}.batch", "_row_kernels.py", goal, make(m), make(1), m,
                 {**desc, "M": "symbolic (left) vs 1 (right)"})]  # fmt: skip


def _sym_times(m, hs: Lin) -> Lin:
    """The grid M * HEADS of head_rms_norm (a product of two integers when M is symbolic)."""
    return T.mul(m if isinstance(m, Lin) else Lin((), m), hs)


def _sym_qkv_specs(sym: dict, hs: Lin, shape: dict, desc: dict) -> list[Spec]:
    """`qkv_rope_store_specs` with HEADS symbolic: the q row ``head_dim * HEADS`` wide, the qkv
    row ``head_dim * HEADS + 2 * kv_heads * head_dim``; the op-by-op path's copies at the
    symbolic offsets and widths, BLOCK = next_pow2(head_dim * heads) of the class."""
    d, kv, bh = sym["head_dim"], sym["kv_heads"], sym["block_h"]
    kw = kv * d
    q, qkv = f"{d}*HEADS", f"{d}*HEADS+{2 * kw}"
    batch = Goal(BATCH, {"q": q}, {"qkv": qkv, "pos": 1, "slot": 1},
                 {"k_cache": ("slot", kw), "v_cache": ("slot", kw)}, shape=shape, int32=_INT32)  # fmt: skip
    equiv = Goal(LAUNCH, {"q": q}, {}, {"k_cache": ("slot", kw), "v_cache": ("slot", kw)},
                 "qkv-rope-store", shape=shape, int32=_INT32)  # fmt: skip

    def fused(m):
        return _with_args(qkv_rope_store_calls(bh, kv, d, m), HEADS=hs)

    def per_op(m):
        calls = per_op_qkv_calls(bh, kv, d, m)
        qw, stride = hs.scale(d), hs.scale(d).add(T.const(2 * kw))
        block_q = _next_pow2(sym["hi"] * d)
        _with_args(calls[:2], SRC_STRIDE=stride)
        _with_args(calls[:1], WIDTH=qw, BLOCK=block_q)
        _with_args(calls[1:2], OFFSET=qw)
        _with_args(calls[2:3], HEADS=hs)
        _with_args(calls[5:6], SRC_STRIDE=stride, OFFSET=qw.add(T.const(kw)))
        return calls

    m, m2 = _m_symbol(), _m_symbol()
    return [
        Spec(f"{sym['key']}.batch", "_row_kernels.py", batch, fused(m), fused(1), m,
             {**desc, "kv_heads": kv, "M": "symbolic (left) vs 1 (right)"}),
        Spec(f"{sym['key']}.equiv.per-op", "_row_kernels.py", equiv, fused(m2), per_op(m2), m2,
             {**desc, "kv_heads": kv, "M": "symbolic", "right": "op by op: split, rope_kernel "
              "(q, k), index_copy_ (k, v) (reference.py)"}),
    ]  # fmt: skip


def _with_args(calls: list[KernelCall], **args) -> list[KernelCall]:
    for c in calls:
        c.args.update(args)
    return calls


def _sym_gated_calls(op: str, block: int, w: Lin, m) -> list[KernelCall]:
    """`rows.silu_mul` / `rows.gelu_mul`'s launch (`rows._gated`) for a symbolic inner width:
    grid (M, cdiv(INNER, BLOCK))."""
    from samebits.kernels.triton.rows import SILU_WARPS

    mm = m if isinstance(m, Lin) else Lin((), m)
    args = dict(gu_ptr=ArrayArg("gu", ACT), out_ptr=ArrayArg("out", ACT), INNER=w, BLOCK=block)
    return [KernelCall(f"{op}_kernel", (mm, CDiv(w, block)), args, SILU_WARPS)]


def symbolic_fused_specs(sym: dict) -> list[Spec]:
    """`linear_add_rms_specs` with N (the fused kernel's WIDTH) a shape symbol bounded by the
    class: for every split-grid launch, goal 1 and the equivalence with the op-by-op path."""
    plan = _units.class_plan(sym)
    n, bias, block = shape_symbol("N"), sym["bias"], sym["block"]
    shape = {"N": (sym["lo"], sym["hi"])}
    kfile, also = _units.KERNEL_FILES["fused"], _units.ALSO_FILES["fused"]
    outputs = {"out": "N", "res": "N"}
    desc = dict(unit=sym["key"], op=sym["op"], n=f"symbolic, {sym['lo']} <= N <= {sym['hi']}",
                k=plan.k, splits=plan.splits, block=block, has_bias=bias)  # fmt: skip

    def fused(la, m):
        mm = m if isinstance(m, Lin) else Lin((), m)
        tail = _with_args(sum_add_rms_calls(plan, mm, bias), WIDTH=n, BLOCK=block)
        return [partials_call(plan, la, mm, n), *tail]

    def per_op(la, m):
        tail = _with_args(rms_calls(block, m, True, x=ArrayArg("y", ACT), w=NORM_W), WIDTH=n)
        return [*linear_calls(plan, la, m, bias, ACT, n), *tail]

    specs = []
    for la in _units.grid_launches(plan):
        m, m2 = _m_symbol(), _m_symbol()
        d = {**desc, "launch": repr(la)}
        specs += [
            Spec(f"{sym['key']}.batch.{_launch_name(la)}", kfile,
                 Goal(BATCH, outputs, {"x": plan.k, "res": "N"}, shape=shape, int32=_INT32), fused(la, m),
                 fused(la, 1), m, {**d, "M": "symbolic (left) vs 1 (right)"}, also),
            Spec(f"{sym['key']}.equiv.{_launch_name(la)}~per-op", kfile,
                 Goal(LAUNCH, outputs, shape=shape, int32=_INT32), fused(la, m2), per_op(la, m2), m2,
                 {**d, "M": "symbolic", "right": "op by op: linear_partials_kernel, "
                  "ordered_sum_kernel, rms_norm_kernel (ADD_RESIDUAL)"}, also),
        ]  # fmt: skip
    return specs


def symbolic_unit_specs(sym: dict) -> list[Spec]:
    """The specializations of a class unit (``units.symbolic_unit``), named after it."""
    if sym["kind"] == "linear" and sym.get("symbolic") == "nk":
        return symbolic_k_linear_specs(sym)
    if sym["kind"] == "linear":
        return symbolic_linear_specs(sym)
    if sym["kind"] == "fused":
        return symbolic_fused_specs(sym)
    if sym["kind"] == "attention":
        return symbolic_attention_specs(sym)
    return symbolic_row_specs(sym)


def symbolic_attention_specs(sym: dict) -> list:
    """An attention head class's specializations: those of a member (kv_heads = lo) with the
    KV head count symbolic (``shape.KV`` in lo..hi), named after the class."""
    import dataclasses

    member = dict(sym, heads=sym["group"] * sym["lo"], kv_heads=sym["lo"], symbolic=None)
    out = []
    for sp in unit_specs(member):
        sp = dataclasses.replace(sp, kv_class=(sym["lo"], sym["hi"]))
        sp.description = {**sp.description, "unit": sym["key"], "kv_heads": "KV",
                          "heads": f"{sym['group']}*KV"}  # fmt: skip
        out.append(sp)
    return out
