"""Certification units: what a deployment's GPU plan launches, named and described without Z3.

A *unit* is one kernel specialization family of a model: a linear weight (role, N x K, bias),
a row kernel at its width (the fused qkv split + RoPE + K/V store at its head shape), the
attention kernel at its head shape (spans in sequence; and the split-KV decode launch, a unit
of its own), or the fused split-K sum + residual add + RMSNorm after an
o / down weight whose plan splits K (kind "fused", proved against several kernel files). The
certificate of a unit lists the proofs of every specialization the engine may launch for it; its
``specialization`` (the split plan and launches, the row kernels' constexprs, the attention
tile constants) is recomputed here from the engine's own functions, so a change of the launch
code as well as of the kernel source invalidates it. Importing this module needs no solver.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from samebits.kernels.attention_check import ATTENTION_BOUNDS as _BOUNDS

KERNEL_DIR = Path(__file__).resolve().parents[1]  # samebits/kernels/triton (this package's parent)
KERNEL_FILES = {
    "linear": "_linear_kernels.py",
    "rows": "_row_kernels.py",
    "attention": "_attention_kernel.py",
    "fused": "_fused_kernels.py",
    "moe": "_moe_kernels.py",
    "moe_combine": "_moe_kernels.py",
    "moe_router": "_moe_router_kernel.py",  # softmax + top-k + renormalization per row
    "gelu": "_gelu_kernel.py",  # Gemma's GeGLU row kernel (a file of its own)
}
# the other kernel files a kind's proofs read, joined to its KERNEL_FILES file: the fused
# kernel imports _rms_apply from the row kernels, and the op-by-op path it is proved equal to
# is the linear's split-K grid (linear_partials_kernel, ordered_sum_kernel) and rms_norm_kernel
# the grouped MoE expert kernel is proved equal to the linear's M = 1 launch
# and the combine kernel to the torch ops of `kernels.moe.combine` stated as Triton text
# GeGLU's kernel imports the software exp (softexp) of the row kernels, attention its softexp2
ALSO_FILES = {"fused": ("_linear_kernels.py", "_row_kernels.py"), "moe": ("_linear_kernels.py",),
              "moe_combine": ("certified/moe_reference.py",), "gelu": ("_row_kernels.py",),
              "attention": ("_softexp2.py",)}  # fmt: skip
ALSO_RECORD = "also_proved_against"  # record field {file: SHA-256} of those files (else absent)
ATTENTION_PAGES = (16, 32)  # block sizes the attention certificates cover


def dims_of(cfg) -> dict:
    """The shape facts of a model config (samebits.model.ModelConfig or a dict). A mixture of
    experts adds ``moe``: experts, expert width, and whether some layer is dense."""
    get = cfg.get if isinstance(cfg, dict) else (lambda k, d=None: getattr(cfg, k, d))
    d = dict(
        hidden=get("hidden_size"), inter=get("intermediate_size"),
        heads=get("num_attention_heads"), kv_heads=get("num_key_value_heads"),
        head_dim=get("head_dim"), vocab=get("vocab_size"),
        head_norm=bool(get("qk_norm", False)), bias=bool(get("attention_bias", False)),
    )  # fmt: skip
    if get("gemma3") is not None:  # Gemma 3: GeGLU instead of SiLU-and-mul
        d["act"] = "gelu"
    moe = get("moe")
    if moe is not None and not isinstance(cfg, dict):
        d["moe"] = dict(experts=moe.num_experts, inter=moe.moe_intermediate_size,
                        dense=cfg.has_dense_layers, top_k=moe.num_experts_per_tok,
                        normalize=moe.norm_topk_prob)  # fmt: skip
    elif moe is not None:
        d["moe"] = dict(moe)
    return d


def linear_shapes(d: dict) -> list[tuple[str, int, int]]:
    """(role, N, K) of every linear the model launches: a MoE model's dense gate_up / down only
    where some layer is dense, plus its router and its experts' gate_up / down."""
    head = [("lm_head", d["vocab"], d["hidden"])]
    return _attention_shapes(d) + _mlp_shapes(d) + _moe_shapes(d) + head


def _attention_shapes(d: dict) -> list[tuple[str, int, int]]:
    qkv = (d["heads"] + 2 * d["kv_heads"]) * d["head_dim"]
    return [("qkv", qkv, d["hidden"]), ("o", d["hidden"], d["heads"] * d["head_dim"])]


def _mlp_shapes(d: dict) -> list[tuple[str, int, int]]:
    """The dense MLP's linears (none in a MoE model whose every layer is sparse)."""
    if d.get("moe") is not None and not d["moe"]["dense"]:
        return []
    return [("gate_up", 2 * d["inter"], d["hidden"]), ("down", d["hidden"], d["inter"])]


def _moe_shapes(d: dict) -> list[tuple[str, int, int]]:
    moe = d.get("moe")
    if moe is None:
        return []
    h, i = d["hidden"], moe["inter"]
    return [("router", moe["experts"], h), ("gate_up", 2 * i, h), ("down", h, i)]


def silu_widths(d: dict) -> list[int]:
    """The widths the SiLU-and-mul kernel runs at: the dense MLP's and the experts'."""
    if d.get("act") == "gelu":
        return []
    widths = [d["inter"]] if _mlp_shapes(d) else []
    return widths + ([d["moe"]["inter"]] if d.get("moe") is not None else [])


def units_for(d: dict, shapes: list[tuple[str, int, int]] | None = None) -> list[dict]:
    """The units of a model: ``shapes`` (role, N, K) default to the config's linears."""
    out = []
    for role, n, k in shapes or linear_shapes(d):
        bias = has_bias(d, role)
        out.append(dict(key=linear_key(role, n, k, bias), kind="linear", role=role, n=n, k=k,
                        bias=bias))  # fmt: skip
    h, hd = d["hidden"], d["head_dim"]
    out += [width_unit("rms_norm", h), width_unit("add_rms_norm", h)]
    out += [dict(key=f"rows.silu_mul.{i}", kind="rows", op="silu_mul", inner=i)
            for i in silu_widths(d)]  # fmt: skip
    if d.get("act") == "gelu":
        out.append(dict(key=f"gelu.gelu_mul.{d['inter']}", kind="gelu", op="gelu_mul",
                        inner=d["inter"]))  # fmt: skip
    out += [head_unit("rope", heads, hd) for heads in sorted({d["heads"], d["kv_heads"]})]
    if d["head_norm"]:
        out += [head_unit("head_rms_norm", h, hd) for h in sorted({d["heads"], d["kv_heads"]})]
    else:  # llama.py `_attention`: without q/k norms the fused qkv split + RoPE + K/V store
        out.append(dict(key=qkv_store_key(d["heads"], d["kv_heads"], hd),
                        kind="rows", op="qkv_rope_store", heads=d["heads"],
                        kv_heads=d["kv_heads"], head_dim=hd))  # fmt: skip
    out.append(dict(key=f"attention.h{d['heads']}.kv{d['kv_heads']}.d{hd}", kind="attention",
                    heads=d["heads"], kv_heads=d["kv_heads"], head_dim=hd))  # fmt: skip
    # the split-KV decode launch (split_span_kernel + merge_spans_kernel), which
    # `attention.decode_splits` may choose for any decode step of few (request, KV head) pairs
    out.append(dict(key=f"attention.split_kv.h{d['heads']}.kv{d['kv_heads']}.d{hd}",
                    kind="attention", launch="split", heads=d["heads"], kv_heads=d["kv_heads"],
                    head_dim=hd))  # fmt: skip
    out += fused_units(d, shapes or _attention_shapes(d) + _mlp_shapes(d))
    out += grouped_units(d)
    seen, uniq = set(), []
    for u in out:
        if u["key"] not in seen:
            seen.add(u["key"])
            uniq.append(u)
    return uniq


# llama.py: ops.linear_add_rms_norm(layer.o / layer.down, ...); a MoE layer's expert down
# projections are not fused (their outputs are combined first), so `units_for` passes only the
# attention's and the dense MLP's shapes here
FUSED_ROLES = ("o", "down")


def has_bias(d: dict, role: str) -> bool:
    """Whether the model's weight of ``role`` has a bias (Qwen2: the qkv projection only)."""
    return d["bias"] and role == "qkv"


def fused_units(d: dict, shapes: list[tuple[str, int, int]]) -> list[dict]:
    """The fused split-K sum + residual add + RMSNorm (`sum_add_rms_norm_kernel`) after each
    o / down weight whose plan splits K: only then can M's launch be the split-K grid whose
    partials `TritonOps.linear_add_rms_norm` sums in the fused kernel (S = 1: op by op)."""
    from samebits.kernels.triton.splitplan import split_plan

    out = []
    for role, n, k in shapes:
        if role in FUSED_ROLES and split_plan(n, k, role).splits > 1:
            bias = has_bias(d, role)
            out.append(dict(key=fused_key(role, n, k, bias), kind="fused",
                            op="linear_add_rms_norm", role=role, n=n, k=k, bias=bias))  # fmt: skip
    return out


def width_unit(op: str, width: int) -> dict:
    """The unit of row kernel ``op`` (rms_norm, add_rms_norm) at one row width."""
    return dict(key=f"rows.{op}.{width}", kind="rows", op=op, width=width)


def head_unit(op: str, heads: int, head_dim: int) -> dict:
    """The unit of per-head row kernel ``op`` (rope, head_rms_norm) at one head count."""
    return dict(key=f"rows.{op}.h{heads}.d{head_dim}", kind="rows", op=op, heads=heads,
                head_dim=head_dim)  # fmt: skip


def linear_key(role: str, n: int, k: int, bias: bool) -> str:
    return f"linear.{role}.{n}x{k}" + (".bias" if bias else "")


def fused_key(role: str, n: int, k: int, bias: bool) -> str:
    """The unit key of the fused split-K sum + add + RMSNorm after weight (role, N, K)."""
    return f"fused.linear_add_rms_norm.{role}.{n}x{k}" + (".bias" if bias else "")


def qkv_store_key(heads: int, kv_heads: int, head_dim: int) -> str:
    """The unit key of the fused qkv split + RoPE + K/V store (`rows.qkv_rope_store`)."""
    return f"rows.qkv_rope_store.h{heads}.kv{kv_heads}.d{head_dim}"


def op_by_op_units(unit: dict) -> list[str] | None:
    """The units of the op-by-op path a fused unit replaces (None: the unit is not fused):
    the engine runs that path where the fused unit has no certificate (`gate.resolve`). The
    fused certificates prove the fused launch equal to it, so either path gives its bits.
    Fused linear + add + RMSNorm: the linear and `rows.add_rms_norm` (width N = hidden);
    qkv split + RoPE + K/V store: RoPE at the query and the KV head counts (`TorchPlacement`
    splits and stores by copies, no kernel of ours)."""
    if unit["kind"] == "fused":
        return [linear_key(unit["role"], unit["n"], unit["k"], unit["bias"]),
                width_unit("add_rms_norm", unit["n"])["key"]]  # fmt: skip
    if unit["kind"] == "rows" and unit["op"] == "qkv_rope_store":
        heads = sorted({unit["heads"], unit["kv_heads"]})
        return [head_unit("rope", h, unit["head_dim"])["key"] for h in heads]
    return None


def grouped_units(d: dict) -> list[dict]:
    """The grouped expert launch (`moe_grouped_kernel`) at a MoE model's expert gate_up and
    down shapes (`TritonOps.moe_experts`: every expert linear of the GPU plan runs there), and
    the combine of its top-k outputs (`moe_combine_kernel`) at (top_k, hidden)."""
    moe = d.get("moe")
    if moe is None:
        return []
    h, i = d["hidden"], moe["inter"]
    out = [dict(key=f"moe.grouped.{role}.{n}x{k}", kind="moe", op="grouped", role=role, n=n,
                k=k) for role, n, k in (("gate_up", 2 * i, h), ("down", h, i))]  # fmt: skip
    if moe.get("top_k"):  # the combine of the k expert outputs (`moe_combine_kernel`)
        out.append(dict(key=f"moe.combine.k{moe['top_k']}.h{h}", kind="moe_combine",
                        op="combine", top_k=moe["top_k"], hidden=h))  # fmt: skip
    if moe.get("top_k") and "normalize" in moe:
        out.append(router_unit(moe["experts"], moe["top_k"], moe["normalize"]))
    return out


def router_unit(experts: int, top_k: int, normalize: bool) -> dict:
    """The router kernel's unit (`moe_router_kernel`: softmax, top-k, renormalization of each
    row of router logits) at (E, top_k, normalize)."""
    key = f"moe.router.e{experts}.k{top_k}" + (".norm" if normalize else "")
    return dict(key=key, kind="moe_router", op="router", experts=experts, top_k=top_k,
                normalize=normalize)  # fmt: skip


def _router_specialization(unit: dict) -> dict:
    """The router launch as `moe_router.route` makes it: BLOCK_T, the tree's width, BLOCK_K,
    warps and the FMA-contraction flag, all functions of (E, top_k) only."""
    from samebits.kernels.triton import moe_router as mr

    e, k = unit["experts"], unit["top_k"]
    log_e = max(0, (e - 1).bit_length())
    return {"op": "router", "experts": e, "top_k": k, "normalize": unit["normalize"],
            "block_t": max(1, mr.ROUTER_ELEMENTS >> log_e), "log_e": log_e,
            "block_k": _next_pow2(k), "warps": mr.ROUTER_WARPS,
            "fp_fusion": mr.ROUTER_FP_FUSION}  # fmt: skip


def grouped_launch_name(la) -> str:
    return f"bm{la.block_m}-bn{la.block_n}-w{la.num_warps}-s{la.num_stages}"


def _grouped_specialization(unit: dict) -> dict:
    """The grouped unit as the engine launches it: the plan, every grouped launch
    (`moe_grouped.GROUPED_TABLE`) and the linear launch its rows are proved equal to."""
    from samebits.kernels.triton.launches import choose_launch
    from samebits.kernels.triton.moe_grouped import grouped_launches
    from samebits.kernels.triton.splitplan import split_plan

    plan = split_plan(unit["n"], unit["k"], unit["role"])
    return {"op": "grouped", "plan": repr(plan),
            "launches": [grouped_launch_name(la) for la in grouped_launches()],
            "reference_launch": launch_name(choose_launch(plan, 1, tma=False))}  # fmt: skip


# --- launches (shared with the prover's specs.py) --------------------------------------


def plan_launches(plan) -> list:
    """Every launch the plan may choose (one per launch-table row, via choose_launch, with and
    without TMA), plus the same tiles in the pointer kinds: the split-K grid, the in-program
    ranges and the TMA kernel must all agree."""
    from samebits.kernels.triton.launches import RANGES, SPLIT_GRID, choose_launch

    chosen = []
    for m in m_probes(plan):
        la = choose_launch(plan, m)
        if la not in chosen:
            chosen.append(la)
    kinds = [RANGES] if plan.splits == 1 else [SPLIT_GRID, RANGES]
    out = list(chosen)
    for la in chosen:
        for k in kinds:
            alt = type(la)(k, la.block_m, la.block_n, la.num_warps, la.num_stages)
            if alt not in out:
                out.append(alt)
    return out


def m_probes(plan) -> list[int]:
    """The M values that reach every row of the plan's launch table: the engine's probes
    (`launches.M_PROBES`) and each row's largest M."""
    from samebits.kernels.triton.launches import M_PROBES, launch_table

    return sorted(set(M_PROBES) | {row[0] for row in launch_table(plan) if row[0] < 1 << 40})


def grid_launches(plan) -> list:
    """The split-K grid launches `choose_launch` may give the plan (with TMA and without):
    those whose partials `TritonLinear.grid_partials` hands to the fused ordered sum. Empty
    for S = 1 (a plan without ranges to sum never runs the grid)."""
    from samebits.kernels.triton.launches import SPLIT_GRID, choose_launch

    out = []
    for m in m_probes(plan):
        for tma in (True, False):
            la = choose_launch(plan, m, tma)
            if la.kind == SPLIT_GRID and la not in out:
                out.append(la)
    return out


def launch_name(la) -> str:
    group = f"-g{la.group_n}" if la.group_n > 1 else ""
    return f"{la.kind}-bm{la.block_m}-bn{la.block_n}-w{la.num_warps}-s{la.num_stages}{group}"


def _next_pow2(x: int) -> int:
    return 1 << (x - 1).bit_length()


def specialization(unit: dict) -> dict:
    """What the engine launches for the unit today (recomputed at every check)."""
    kind = unit["kind"]
    if kind == "linear":
        from samebits.kernels.triton.linear import ORDERED_SUM_BLOCK, ORDERED_SUM_WARPS
        from samebits.kernels.triton.splitplan import split_plan

        plan = split_plan(unit["n"], unit["k"], unit["role"])
        return {"plan": repr(plan), "launches": [launch_name(la) for la in plan_launches(plan)],
                "ordered_sum": [ORDERED_SUM_BLOCK, ORDERED_SUM_WARPS]}  # fmt: skip
    if kind == "fused":
        return _fused_specialization(unit)
    if kind == "moe":
        return _grouped_specialization(unit)
    if kind == "moe_combine":
        from samebits.kernels.triton import moe_grouped as mg

        return {"op": "combine", "top_k": unit["top_k"], "hidden": unit["hidden"],
                "block": mg.combine_block(unit["hidden"]), "warps": mg.COMBINE_WARPS,
                "fp_fusion": mg.COMBINE_FP_FUSION}  # fmt: skip
    if kind == "moe_router":
        return _router_specialization(unit)
    if kind == "gelu":
        from samebits.kernels.triton import rows

        block = min(rows.SILU_BLOCK, _next_pow2(unit["inner"]))
        return {"op": "gelu_mul", "inner": unit["inner"], "block": block, "warps": rows.SILU_WARPS}
    if kind == "rows":
        from samebits.kernels.triton import rows

        op = unit["op"]
        if op in ("rms_norm", "add_rms_norm", "head_rms_norm"):
            w = unit["width"] if "width" in unit else unit["head_dim"]
            block = _next_pow2(w)
            return {"op": op, "width": w, "block": block, "warps": rows.row_num_warps(block)}
        if op == "silu_mul":
            block = min(rows.SILU_BLOCK, _next_pow2(unit["inner"]))
            return {"op": op, "inner": unit["inner"], "block": block, "warps": rows.SILU_WARPS}
        if op == "qkv_rope_store":
            h, kv, d = unit["heads"], unit["kv_heads"], unit["head_dim"]
            return {"op": op, "heads": h, "kv_heads": kv, "half": d // 2,
                    "block_h": _next_pow2(h), "block_kv": _next_pow2(kv),
                    "block_d": _next_pow2(d // 2), "block_v": _next_pow2(kv * d),
                    "warps": rows.ROPE_WARPS}  # fmt: skip
        return {"op": op, "heads": unit["heads"], "half": unit["head_dim"] // 2,
                "block_h": _next_pow2(unit["heads"]), "block_d": _next_pow2(unit["head_dim"] // 2),
                "warps": rows.ROPE_WARPS}  # fmt: skip
    g = unit["heads"] // unit["kv_heads"]
    shape = {"heads": unit["heads"], "kv_heads": unit["kv_heads"], "head_dim": unit["head_dim"]}
    return _launch_facts(shape, g, unit.get("launch") == "split")


def _attention_specialization(sym: dict) -> dict:
    """A head class of attention as the engine launches every member (KV heads lo..hi)."""
    shape = {"group": sym["group"], "kv_heads": [sym["lo"], sym["hi"]],
             "head_dim": sym["head_dim"]}  # fmt: skip
    return _launch_facts(shape, sym["group"], sym.get("launch") == "split")


def _launch_facts(shape: dict, g: int, split: bool) -> dict:
    """The attention launch facts for GQA group ``g``: key tile, span, int32 bounds, tile
    heights, pages, warps (and the split-KV decode launch's kernels)."""
    from samebits.kernels.interface import ATTENTION_SPAN
    from samebits.kernels.triton import attention_meta as am
    from samebits.kernels.triton.attention import KEY_BLOCK

    shape = {**shape, "key_block": KEY_BLOCK, "span": ATTENTION_SPAN,
             "int32_bounds": dict(ATTENTION_BOUNDS)}  # fmt: skip
    if split:  # decode tiles (`default_block_m(1, group)`), any S
        return {**shape, "launch": "split_kv", "block_m": am.default_block_m(1, g),
                "merge_block_m": am.merge_block_m(g),
                "pages": list(ATTENTION_PAGES), "warps": am.SPLIT_WARPS,
                "merge_warps": am.MERGE_WARPS,
                "kernels": ["split_span_kernel", "merge_spans_kernel"],
                "programs_per_request": "any"}  # fmt: skip
    bms = am.tile_heights(g)
    warps = {str(b): am.default_num_warps(b) for b in bms}
    return {**shape, "block_m": bms, "pages": list(ATTENTION_PAGES), "warps": warps}


def _fused_specialization(unit: dict) -> dict:
    """The fused unit as the engine launches it: the plan, the split-K grid launches whose
    partials the fused kernel sums (`grid_launches`), and `rows.sum_add_rms_norm`'s BLOCK and
    warps; the op-by-op path it is proved equal to launches `ordered_sum_kernel` with
    ``linear.ORDERED_SUM_*`` and `rms_norm_kernel` with the same BLOCK and warps."""
    from samebits.kernels.triton import rows
    from samebits.kernels.triton.linear import ORDERED_SUM_BLOCK, ORDERED_SUM_WARPS
    from samebits.kernels.triton.splitplan import split_plan

    plan = split_plan(unit["n"], unit["k"], unit["role"])
    block = _next_pow2(unit["n"])
    return {"op": unit["op"], "plan": repr(plan),
            "grid_launches": [launch_name(la) for la in grid_launches(plan)],
            "block": block, "warps": rows.row_num_warps(block),
            "ordered_sum": [ORDERED_SUM_BLOCK, ORDERED_SUM_WARPS]}  # fmt: skip


def kernel_file(unit: dict) -> Path:
    return KERNEL_DIR / KERNEL_FILES[unit["kind"]]


def also_files(unit: dict) -> tuple:
    """The further kernel files the unit's proofs read (none for a one-file unit)."""
    return ALSO_FILES.get(unit["kind"], ())


def also_sources(files: tuple) -> dict[str, str]:
    """SHA-256 of each further kernel file (``ALSO_FILES``) a proof read, by file name."""
    return {f: source_sha256(KERNEL_DIR / f) for f in files}


def source_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_text().encode()).hexdigest()


# --- symbolic-shape units (one certificate per shape class) -----------------------------
#
# A class unit's proofs hold for every shape of its class (the shape integers are symbolic in
# the proof, `Goal.shape`), so a model whose concrete unit has no certificate of its own is
# covered by its class's certificate: the gate (`gate.check_unit`) recomputes the class from
# the concrete unit and compares the class specialization, and checks the shape against the
# bounds the proofs were made for (`SHAPE_RECORD`). Classes: a linear's N (K and the plan stay
# concrete: the k loop is unrolled), the row width of rms_norm / add_rms_norm / silu_mul.

SHAPE_RECORD = "shape"  # record field {symbol: [lo, hi]}: the bounds every proof assumed
N_MAX = 1 << 24  # the largest N / width a class certificate covers (stated bound)
# the most rows (M) of one launch the class proofs' int32 obligations assume: a step's tokens
# (the scheduler's max_num_batched_tokens; CUDA-graph padding stays below it)
M_MAX = 1 << 20
# the deployment bounds of the attention certificates' int32 obligations (kernels.attention_check)
ATTENTION_BOUNDS = {**_BOUNDS, "M_MAX": M_MAX}


def _tma_rows(plan) -> list:
    from samebits.kernels.triton.launches import TMA, launch_table

    return [row for row in launch_table(plan) if row[1] == TMA]


def linear_n_class(plan) -> tuple[int, int]:
    """The N range of the plan's class: the launch table is the same for every N in it
    (S > 1: one table; S = 1: narrow or wide, `launches.WIDE_N`), and every TMA row's group is
    full (`tma_grid`: GROUP_N = min(group_n, cdiv(N, block_n)) = group_n, a constexpr)."""
    from samebits.kernels.triton.launches import WIDE_N

    lo = max([(row[6] - 1) * row[3] + 1 for row in _tma_rows(plan)] or [1])
    if plan.splits > 1:
        return lo, N_MAX
    return (lo, WIDE_N - 1) if plan.n < WIDE_N else (max(lo, WIDE_N), N_MAX)


def width_class(width: int, cap: int | None = None) -> tuple[int, int, int]:
    """(block, lo, hi): widths lo..hi share the row kernel's BLOCK = next_pow2(width) (capped
    at ``cap``: a column-blocked kernel) and so its warps."""
    block = _next_pow2(width)
    if cap is not None and block >= cap:
        return cap, cap // 2 + 1, N_MAX
    return block, block // 2 + 1, block


def linear_k_fixed_class(unit: dict) -> dict | None:
    """A linear unit's class with K fixed (N symbolic only): the classes before K classes."""
    return _linear_class(unit, k_symbolic=False)


def symbolic_unit(unit: dict) -> dict | None:
    """The class unit whose certificate covers ``unit`` (None: no class; per-shape only)."""
    if unit.get("symbolic"):  # a class unit itself
        return None
    if unit["kind"] == "linear":
        return _linear_class(unit)
    if unit["kind"] == "fused":
        return _fused_class(unit)
    if unit["kind"] == "rows" and unit["op"] in ("rms_norm", "add_rms_norm"):
        block, lo, hi = width_class(unit["width"])
        if lo > unit["width"] or unit["width"] > hi:
            return None
        return dict(key=f"rows.{unit['op']}.w{lo}-{hi}", kind="rows", op=unit["op"],
                    symbolic="width", lo=lo, hi=hi, block=block)  # fmt: skip
    if unit["kind"] in ("rows", "gelu") and unit["op"] in ("silu_mul", "gelu_mul"):
        from samebits.kernels.triton.rows import SILU_BLOCK

        block, lo, hi = width_class(unit["inner"], SILU_BLOCK)
        if not lo <= unit["inner"] <= hi:
            return None
        return dict(key=f"{unit['kind']}.{unit['op']}.w{lo}-{hi}", kind=unit["kind"],
                    op=unit["op"], symbolic="width", lo=lo, hi=hi, block=block)  # fmt: skip
    if unit["kind"] == "rows" and unit["op"] in HEAD_CLASS_OPS:
        return head_class(unit)
    if unit["kind"] == "attention":
        return attention_class(unit)
    return None


def attention_class(unit: dict) -> dict | None:
    """The head class of an attention unit: every KV head count 1..HEADS_MAX at the unit's
    group (heads // kv_heads: the tile's GQA packing) and head_dim; one class per launch
    (spans in sequence, split-KV decode). The kernels see the KV head count only in index
    arithmetic, which the class proof keeps symbolic (``shape.KV``)."""
    g, d, kv = unit["heads"] // unit["kv_heads"], unit["head_dim"], unit["kv_heads"]
    if unit["heads"] % kv or not 1 <= kv <= HEADS_MAX:
        return None
    split = unit.get("launch") == "split"
    out = dict(key=f"attention.{'split_kv.' if split else ''}g{g}.d{d}", kind="attention",
               symbolic="kv_heads", lo=1, hi=HEADS_MAX, group=g, head_dim=d)  # fmt: skip
    if split:
        out["launch"] = "split"
    return out


# row kernels whose class makes the head count symbolic (HEADS; head_dim and, for the fused
# qkv kernel, the KV head count stay concrete): rope and the fused qkv split + RoPE + K/V store
# over BLOCK_H = next_pow2(heads); head_rms_norm (one program per (token, head), the kernel
# never sees the head count) over 1..HEADS_MAX
HEAD_CLASS_OPS = ("rope", "qkv_rope_store", "head_rms_norm")
HEADS_MAX = 1 << 10  # the most heads a head class covers (stated bound)


def head_class(unit: dict) -> dict | None:
    """The class of a rope / qkv_rope_store / head_rms_norm unit: heads in one BLOCK_H class
    (head_rms_norm: 1..HEADS_MAX), head_dim (and kv_heads) fixed. None where a block the launch
    derives from the head count (`qkv_rope_store`: the op-by-op path's copy of q, BLOCK =
    next_pow2(heads * head_dim)) is not constant over the class."""
    op, h, d = unit["op"], unit["heads"], unit["head_dim"]
    if op == "head_rms_norm":
        lo, hi, block = 1, HEADS_MAX, None
    else:
        block, lo, hi = width_class(h)
    if not lo <= h <= hi or h > HEADS_MAX:
        return None
    if op == "qkv_rope_store" and _next_pow2(lo * d) != _next_pow2(hi * d):
        return None
    kv = f".kv{unit['kv_heads']}" if op == "qkv_rope_store" else ""
    out = dict(key=f"rows.{op}.h{lo}-{hi}{kv}.d{d}", kind="rows", op=op, symbolic="heads",
               lo=lo, hi=hi, head_dim=d, block_h=block)  # fmt: skip
    if op == "qkv_rope_store":
        out["kv_heads"] = unit["kv_heads"]
    return out


# K classes (issue 28): the k loop is summarized by induction (`symbolic.folds`), so one
# proof set covers every K of a plan kind. The plan fixes, for S ranges of BLOCK_K = 64 steps:
# RANGE_K = 64 * STEPS, and K = S * RANGE_K (S > 1: `split_plan` splits only when
# k % (S * 64) == 0, with STEPS >= MIN_STEPS_PER_RANGE) or K = RANGE_K - PAD, 0 <= PAD < 64
# (S = 1: the one range is K rounded up to a multiple of 64, the last step masked).
K_MAX = 1 << 20  # the largest K a K class covers (stated bound)
K_BLOCK = 64  # the plans' block_k for every K >= 64 (`plan_block_k`)


def k_class_bounds(splits: int) -> dict:
    """The shape symbols of a K class and their inclusive bounds (STEPS; S = 1: PAD too)."""
    from samebits.kernels.triton.splitplan import MIN_STEPS_PER_RANGE

    if splits > 1:
        return {"STEPS": [MIN_STEPS_PER_RANGE, K_MAX // (splits * K_BLOCK)]}
    return {"STEPS": [1, K_MAX // K_BLOCK], "PAD": [0, K_BLOCK - 1]}


def k_class_values(plan) -> dict | None:
    """The K-class symbols of ``plan`` (None: the plan is not of a K class): STEPS =
    range_k / 64 and, S = 1, PAD = range_k - K; the constraints above are checked here."""
    if plan.block_k != K_BLOCK or plan.range_k % K_BLOCK or plan.k > K_MAX:
        return None
    steps = plan.range_k // K_BLOCK
    if plan.splits > 1:
        return {"STEPS": steps} if plan.k == plan.splits * plan.range_k else None
    pad = plan.range_k - plan.k
    return {"STEPS": steps, "PAD": pad} if 0 <= pad < K_BLOCK else None


def _linear_class(unit: dict, k_symbolic: bool = True) -> dict | None:
    """The linear's class: N in the plan's N class and, where the plan is of a K class
    (`k_class_values`) and ``k_symbolic``, every K of the plan kind; else K fixed."""
    from samebits.kernels.triton.splitplan import ROW_PARALLEL_ROLES, split_plan

    plan = split_plan(unit["n"], unit["k"], unit["role"])
    lo, hi = linear_n_class(plan)
    if not lo <= unit["n"] <= hi:
        return None
    rc = "row_parallel" if unit["role"] in ROW_PARALLEL_ROLES else "column"
    out = "fp32" if unit["role"] in FLOAT32_OUT_ROLES else "bf16"
    if k_symbolic and k_class_values(plan) is not None:
        key = f"linear.{rc}.{out}.N{lo}-{hi}.s{plan.splits}.k{K_BLOCK}"
        key += ".bias" if unit["bias"] else ""
        return dict(key=key, kind="linear", symbolic="nk", role_class=rc, role=unit["role"],
                    out_dtype=out, lo=lo, hi=hi, splits=plan.splits, bias=unit["bias"])  # fmt: skip
    key = f"linear.{rc}.{out}.N{lo}-{hi}x{unit['k']}" + (".bias" if unit["bias"] else "")
    return dict(key=key, kind="linear", symbolic="n", role_class=rc, role=unit["role"],
                out_dtype=out, lo=lo, hi=hi, k=unit["k"], bias=unit["bias"])  # fmt: skip


def _fused_class(unit: dict) -> dict | None:
    """The fused split-K sum + add + RMSNorm after a split plan: N in the linear's class and
    in one BLOCK class of the row width (the fused kernel's BLOCK = next_pow2(N))."""
    from samebits.kernels.triton.splitplan import split_plan

    plan = split_plan(unit["n"], unit["k"], unit["role"])
    nlo, nhi = linear_n_class(plan)
    block, wlo, whi = width_class(unit["n"])
    lo, hi = max(nlo, wlo), min(nhi, whi)
    if not lo <= unit["n"] <= hi:
        return None
    key = f"fused.linear_add_rms_norm.row_parallel.N{lo}-{hi}x{unit['k']}"
    key += ".bias" if unit["bias"] else ""
    return dict(key=key, kind="fused", op=unit["op"], symbolic="n", role=unit["role"],
                lo=lo, hi=hi, k=unit["k"], bias=unit["bias"], block=block)  # fmt: skip


# the roles whose linear writes float32 (samebits.kernels.interface.FLOAT32_ROLES; the
# prover's specs.FLOAT32_ROLES, which tests/unit/test_moe_config.py checks)
FLOAT32_OUT_ROLES = ("lm_head", "router")


def class_plan(sym: dict):
    """A plan of the class (its lower bound's N): splits, block_k and range_k are the class's
    (a K class: the plan of its smallest K, whose launch table is every member's)."""
    from samebits.kernels.triton.splitplan import SplitPlan, split_plan

    if sym.get("symbolic") == "nk":
        steps = k_class_bounds(sym["splits"])["STEPS"][0]
        rk = steps * K_BLOCK
        return SplitPlan(n=sym["lo"], k=sym["splits"] * rk, splits=sym["splits"],
                         block_k=K_BLOCK, range_k=rk)  # fmt: skip
    return split_plan(sym["lo"], sym["k"], sym["role"])


def class_bounds(sym: dict) -> dict:
    """The shape symbols every proof of class ``sym`` assumes, with their bounds."""
    if sym.get("symbolic") == "nk":
        return {"N": [sym["lo"], sym["hi"]], **k_class_bounds(sym["splits"])}
    name = {"heads": "HEADS", "width": "WIDTH", "kv_heads": "KV"}.get(str(sym.get("symbolic")), "N")
    return {name: [sym["lo"], sym["hi"]]}


def shape_values(unit: dict, sym: dict) -> dict | None:
    """The concrete unit's values of the class's shape symbols (None: its plan is not of the
    class, e.g. K breaks the class's constraint)."""
    if sym.get("symbolic") != "nk":
        return {next(iter(class_bounds(sym))): shape_value(unit, sym)}
    from samebits.kernels.triton.splitplan import split_plan

    plan = split_plan(unit["n"], unit["k"], unit["role"])
    ks = k_class_values(plan)
    if ks is None or plan.splits != sym["splits"]:
        return None
    return {"N": unit["n"], **ks}


def symbolic_specialization(sym: dict) -> dict:
    """What the engine launches for every shape of the class (recomputed at every check)."""
    from samebits.kernels.triton import rows

    if sym["kind"] == "linear" and sym.get("symbolic") == "nk":
        from samebits.kernels.triton.linear import ORDERED_SUM_BLOCK, ORDERED_SUM_WARPS

        plan = class_plan(sym)
        return {"plan": {"k": f"{plan.splits}*RANGE_K" if plan.splits > 1 else "RANGE_K-PAD",
                         "splits": plan.splits, "block_k": K_BLOCK, "range_k": "64*STEPS"},
                "n": [sym["lo"], sym["hi"]], "k_max": K_MAX,
                "launches": [launch_name(la) for la in plan_launches(plan)],
                "ordered_sum": [ORDERED_SUM_BLOCK, ORDERED_SUM_WARPS], "m_max": M_MAX}  # fmt: skip
    if sym["kind"] == "linear":
        from samebits.kernels.triton.linear import ORDERED_SUM_BLOCK, ORDERED_SUM_WARPS

        plan = class_plan(sym)
        return {"plan": {"k": plan.k, "splits": plan.splits, "block_k": plan.block_k,
                         "range_k": plan.range_k}, "n": [sym["lo"], sym["hi"]],
                "launches": [launch_name(la) for la in plan_launches(plan)],
                "ordered_sum": [ORDERED_SUM_BLOCK, ORDERED_SUM_WARPS], "m_max": M_MAX}  # fmt: skip
    if sym["kind"] == "fused":
        from samebits.kernels.triton.linear import ORDERED_SUM_BLOCK, ORDERED_SUM_WARPS

        plan = class_plan(sym)
        return {"op": sym["op"], "plan": {"k": plan.k, "splits": plan.splits,
                "block_k": plan.block_k, "range_k": plan.range_k}, "n": [sym["lo"], sym["hi"]],
                "grid_launches": [launch_name(la) for la in grid_launches(plan)],
                "block": sym["block"], "warps": rows.row_num_warps(sym["block"]),
                "ordered_sum": [ORDERED_SUM_BLOCK, ORDERED_SUM_WARPS], "m_max": M_MAX}  # fmt: skip
    if sym["kind"] == "attention":
        return _attention_specialization(sym)
    if sym["op"] in ("silu_mul", "gelu_mul"):
        return {"op": sym["op"], "width": [sym["lo"], sym["hi"]], "block": sym["block"],
                "warps": rows.SILU_WARPS, "m_max": M_MAX}  # fmt: skip
    if sym["op"] in HEAD_CLASS_OPS:
        return _head_class_specialization(sym)
    return {"op": sym["op"], "width": [sym["lo"], sym["hi"]], "block": sym["block"],
            "warps": rows.row_num_warps(sym["block"]), "m_max": M_MAX}  # fmt: skip


def _head_class_specialization(sym: dict) -> dict:
    """A head class as the engine launches every member: `rows.rope` / `rows.qkv_rope_store`
    (BLOCK_H, BLOCK_KV, BLOCK_D, BLOCK_V, warps) or `rows.head_rms_norm` (the rms_norm launch
    at width head_dim, one program per (token, head))."""
    from samebits.kernels.triton import rows

    d, heads = sym["head_dim"], [sym["lo"], sym["hi"]]
    if sym["op"] == "head_rms_norm":
        block = _next_pow2(d)
        return {"op": "head_rms_norm", "heads": heads, "width": d, "block": block,
                "warps": rows.row_num_warps(block), "m_max": M_MAX}  # fmt: skip
    out = {"op": sym["op"], "heads": heads, "half": d // 2, "block_h": sym["block_h"],
           "block_d": _next_pow2(d // 2), "warps": rows.ROPE_WARPS, "m_max": M_MAX}  # fmt: skip
    if sym["op"] == "qkv_rope_store":
        kv = sym["kv_heads"]
        out.update(kv_heads=kv, block_kv=_next_pow2(kv), block_v=_next_pow2(kv * d),
                   block_q=_next_pow2(sym["hi"] * d))  # fmt: skip
    return out


def shape_value(unit: dict, sym: dict) -> int:
    """The concrete unit's value of the class's shape integer (N, the row width, or the head
    count of a head class); a head class also needs the unit's head_dim (and kv_heads)."""
    if sym["kind"] in ("linear", "fused"):
        return unit["n"]
    if sym.get("symbolic") == "heads":
        return unit["heads"]
    if sym.get("symbolic") == "kv_heads":
        return unit["kv_heads"]
    return unit["width"] if "width" in unit else unit["inner"]
