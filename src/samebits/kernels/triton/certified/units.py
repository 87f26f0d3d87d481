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

KERNEL_DIR = Path(__file__).resolve().parents[1]  # samebits/kernels/triton (this package's parent)
KERNEL_FILES = {
    "linear": "_linear_kernels.py",
    "rows": "_row_kernels.py",
    "attention": "_attention_kernel.py",
    "fused": "_fused_kernels.py",
    "gelu": "_gelu_kernel.py",  # Gemma's GeGLU row kernel (a file of its own)
}
# the other kernel files a kind's proofs read, joined to its KERNEL_FILES file: the fused
# kernel imports _rms_apply from the row kernels, and the op-by-op path it is proved equal to
# is the linear's split-K grid (linear_partials_kernel, ordered_sum_kernel) and rms_norm_kernel
ALSO_FILES = {"fused": ("_linear_kernels.py", "_row_kernels.py")}
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
                        dense=cfg.has_dense_layers)  # fmt: skip
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
        key = f"linear.{role}.{n}x{k}" + (".bias" if bias else "")
        out.append(dict(key=key, kind="linear", role=role, n=n, k=k, bias=bias))
    h, hd = d["hidden"], d["head_dim"]
    out += [
        dict(key=f"rows.rms_norm.{h}", kind="rows", op="rms_norm", width=h),
        dict(key=f"rows.add_rms_norm.{h}", kind="rows", op="add_rms_norm", width=h),
    ]
    out += [dict(key=f"rows.silu_mul.{i}", kind="rows", op="silu_mul", inner=i)
            for i in silu_widths(d)]  # fmt: skip
    if d.get("act") == "gelu":
        out.append(dict(key=f"gelu.gelu_mul.{d['inter']}", kind="gelu", op="gelu_mul",
                        inner=d["inter"]))  # fmt: skip
    for heads in sorted({d["heads"], d["kv_heads"]}):
        out.append(dict(key=f"rows.rope.h{heads}.d{hd}", kind="rows", op="rope", heads=heads,
                        head_dim=hd))  # fmt: skip
    if d["head_norm"]:
        for heads in sorted({d["heads"], d["kv_heads"]}):
            out.append(dict(key=f"rows.head_rms_norm.h{heads}.d{hd}", kind="rows",
                            op="head_rms_norm", heads=heads, head_dim=hd))  # fmt: skip
    else:  # llama.py `_attention`: without q/k norms the fused qkv split + RoPE + K/V store
        out.append(dict(key=f"rows.qkv_rope_store.h{d['heads']}.kv{d['kv_heads']}.d{hd}",
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
            key = f"fused.linear_add_rms_norm.{role}.{n}x{k}" + (".bias" if bias else "")
            out.append(dict(key=key, kind="fused", op="linear_add_rms_norm", role=role, n=n,
                            k=k, bias=bias))  # fmt: skip
    return out


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
    (`backend._M_PROBES`) and each row's largest M."""
    from samebits.kernels.triton.backend import _M_PROBES
    from samebits.kernels.triton.launches import launch_table

    return sorted(set(_M_PROBES) | {row[0] for row in launch_table(plan) if row[0] < 1 << 40})


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
    from samebits.kernels.interface import ATTENTION_SPAN
    from samebits.kernels.triton import attention_meta as am
    from samebits.kernels.triton.attention import KEY_BLOCK

    g = unit["heads"] // unit["kv_heads"]
    shape = {"heads": unit["heads"], "kv_heads": unit["kv_heads"], "head_dim": unit["head_dim"],
             "key_block": KEY_BLOCK, "span": ATTENTION_SPAN}  # fmt: skip
    if unit.get("launch") == "split":  # decode tiles (`default_block_m(1, group)`), any S
        return {**shape, "launch": "split_kv", "block_m": am.default_block_m(1, g),
                "pages": list(ATTENTION_PAGES), "warps": am.ATTENTION_WARPS,
                "kernels": ["split_span_kernel", "merge_spans_kernel"],
                "programs_per_request": "any"}  # fmt: skip
    bms = sorted({max(b, _next_pow2(g)) for b in (am.PREFILL_BLOCK_M, am.DECODE_BLOCK_M)})
    return {**shape, "block_m": bms, "pages": list(ATTENTION_PAGES), "warps": am.ATTENTION_WARPS}


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
