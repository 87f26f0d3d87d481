"""Certificates: one JSON per deployed specialization and goal.

Each certificate names the kernel source (path and SHA-256), the specialization (constexpr
values, grid, launch), the goal, the assumptions the proof rests on, the prover and Z3
versions, and the result (proved, or the counterexample / the unsupported construct).
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
from pathlib import Path

import z3

from samebits.analysis.kernel_prover.attention import ASSUMPTIONS as ATTENTION_ASSUMPTIONS
from samebits.analysis.kernel_prover.attention import (
    SPLIT,
    SPLIT_ASSUMPTIONS,
    AttentionSpec,
    prove_attention,
)
from samebits.analysis.kernel_prover.attention import calls as attention_calls
from samebits.analysis.kernel_prover.moe import ASSUMPTIONS as GROUPED_ASSUMPTIONS
from samebits.analysis.kernel_prover.moe import GroupedSpec, prove_grouped
from samebits.analysis.kernel_prover.prover import Result, prove
from samebits.analysis.kernel_prover.specs import Spec, all_specs, symbolic_unit_specs, unit_specs
from samebits.analysis.kernel_prover.symbolic.source import KernelSource
from samebits.analysis.kernel_prover.symbolic.tl_semantics import DOT_ATOM
from samebits.analysis.kernel_prover.symbolic.values import CDiv, Unsupported
from samebits.analysis.kernel_prover.terms import Lin
from samebits.kernels.triton.certified import units as U

PROVER_NAME = "samebits.kernel_prover"
PROVER_VERSION = "0.1"

ASSUMPTIONS = {
    "float-uninterpreted": "every floating-point operation (add, mul, div, div_rn, sqrt_rn, "
    "exp, exp2, casts, tl.dot atoms, layout reductions) is a deterministic function of its "
    "operands: equal operands give equal results; nothing else about floats is assumed but "
    "IEEE 754 on zeros: +0.0 + +0.0, +0.0 - +0.0, +0.0 * +0.0 and a cast of +0.0 are +0.0 "
    "(exact in every format; the masked lanes of a row block). Likewise every operation on "
    "data-dependent integers and predicates (bit casts, float <-> int conversions, integer "
    "adds / shifts on such integers, float comparisons, selects on such predicates: "
    "symbolic/words.py) is a deterministic function of its operands, with no identity "
    "between different operations",
    "tl.dot-k-atom-chain": f"tl.dot(a, b, acc) computes each output element as a left-to-right "
    f"chain over k-atoms of {DOT_ATOM}: acc = DOT{DOT_ATOM}(acc, a[m, k0:k0+{DOT_ATOM}], "
    f"b[k0:k0+{DOT_ATOM}, n]) for k0 = 0, {DOT_ATOM}, ... in order; independent of BLOCK_M, "
    "BLOCK_N, num_warps, num_stages, of how k is grouped into BLOCK_K tiles and of whether the "
    "operands came through pointer loads or TMA descriptors. Qualified on the H200 (Triton "
    "3.6): tests/gpu/test_gpu_kernels.py (every launch the plan may choose, pointer and TMA, "
    "rows at M = 1..8192) and DESIGN.md section 2b measurements",
    "no-dot-fold": "Triton does not fold `total + tl.dot(a, b, 0)` into `tl.dot(a, b, total)`; "
    "the split plan keeps >= MIN_STEPS_PER_RANGE steps per range (DESIGN.md 2b, splitplan.py)",
    "tl.sum-layout": "(linear and row kernels) tl.sum / tl.max over a float tile is a function "
    "of the element sequence AND the layout (tile shape, axis, num_warps): two reductions are "
    "equal only when both their operands and their layouts are equal",
    "memory": "distinct pointer arguments do not alias unless the specialization passes the same "
    "array; reads outside the rows an M = 1 launch was given see unrelated memory; integer "
    "index arithmetic is exact (no int32 overflow check)",
    "kernel-sequencing": "the kernel calls of one launch run in order (stream order), so a "
    "later call reads what the earlier calls stored",
    "tma-zero-fill": "a TMA descriptor load `desc.load([r, c])` reads the box of the row-major "
    "[rows, cols] array at (r, c), and +0.0 for every element with a row >= rows or a column "
    ">= cols (the descriptor's zero padding; offsets are non-negative)",
}

# named only by the certificates whose goal uses them (scatter outputs; a reference path)
SCATTER_ASSUMPTIONS = {
    "slot-injective": "the slot mapping of a launch is injective over its rows: two rows "
    "(tokens) of one launch have different slots, the KV-cache manager's invariant (each "
    "token of a step is written to its own cache row). Rows that share a slot are padding rows "
    "(a CUDA graph's padded batch, all aimed at one sink slot) whose writes no row reads: "
    "which of them the sink holds is not part of any output. Used for the K/V cache outputs "
    "(`Goal.scatter`), where row r's element (slot[r], c) is compared; the prover also checks "
    "that every cache store stays in the cache row of the slot of a row of the launch",
}
REFERENCE_ASSUMPTIONS = {
    "reference-path": "the torch ops of the op-by-op path are the bit copies stated as Triton "
    "text in kernel_prover/reference.py: `.contiguous()` of a column slice of qkv "
    "(split_copy_kernel) and `index_copy_(0, slot_mapping, src)` (index_copy_kernel; with "
    "`slot-injective` no two rows write one slot); the path's RoPE is the kernel file's "
    "rope_kernel, launched as `rows.rope` launches it",
}


def _jsonable(v):
    if isinstance(v, Lin):
        return str(v)
    if isinstance(v, CDiv):
        return f"cdiv({v.num}, {v.den})"
    if hasattr(v, "__dataclass_fields__"):
        return {k: _jsonable(getattr(v, k)) for k in v.__dataclass_fields__}
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    return v


def _prover_digest() -> str:
    """SHA-256 over the prover's own sources: this package's modules and `symbolic/`."""
    h = hashlib.sha256()
    root = Path(__file__).parent
    for f in sorted(root.rglob("*.py")):
        h.update(f.relative_to(root).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def joined(text: str, filename: str, also_files: tuple = ()) -> KernelSource:
    """The kernel file's text parsed, the shipped ``also_files`` joined to it."""
    src = KernelSource.parse(text, filename)
    return src.join([KernelSource.parse((U.KERNEL_DIR / f).read_text(), f) for f in also_files])


def prove_spec(spec, source_path: Path | str | None = None) -> tuple[Result, str, str]:
    """Prove one specialization against the kernel file (default: the shipped kernels; the
    further files of ``spec.also_files`` are always the shipped ones, joined to it).
    Returns ``(result, source path, source sha256)`` of the kernel file."""
    path = Path(source_path) if source_path else U.KERNEL_DIR / spec.kernel_file
    src = KernelSource.parse(path.read_text(), path.name)
    try:
        src = joined(path.read_text(), path.name, spec.also_files)
    except Unsupported as u:  # an import the joined files do not satisfy: rejected
        return Result(False, spec.goal, 0.0, {}, unsupported=str(u)), str(path), src.sha256
    if isinstance(spec, AttentionSpec):
        return prove_attention(src, spec), str(path), src.sha256
    if isinstance(spec, GroupedSpec):
        return prove_grouped(src, spec), str(path), src.sha256
    return prove(src, spec.goal, spec.left, spec.right, spec.m_left), str(path), src.sha256


def _launches(spec) -> tuple[list, list]:
    if isinstance(spec, AttentionSpec):
        return attention_calls("L", spec, spec.left), attention_calls("R", spec, spec.right)
    return spec.left, spec.right


def certificate(spec, result: Result, path: str, sha: str) -> dict:
    left, right = _launches(spec)
    assumptions = dict(ASSUMPTIONS)
    if isinstance(spec, AttentionSpec):
        assumptions.pop("tl.sum-layout")
        assumptions.update(ATTENTION_ASSUMPTIONS)
        if SPLIT in (spec.left.launch, spec.right.launch):
            assumptions.update(SPLIT_ASSUMPTIONS)
    elif isinstance(spec, GroupedSpec):
        assumptions.update(GROUPED_ASSUMPTIONS)
    else:
        if spec.goal.scatter:
            assumptions.update(SCATTER_ASSUMPTIONS)
        if spec.goal.reference:
            assumptions.update(REFERENCE_ASSUMPTIONS)
    return {
        "specialization": spec.name,
        "kernel_file": path,
        "kernel_source_sha256": sha,
        **_also_record(spec.also_files),
        "kernels": sorted({c.kernel for c in left + right}),
        "description": spec.description,
        "left_launch": [_jsonable(c) for c in left],
        "right_launch": [_jsonable(c) for c in right],
        "goal": spec.goal.to_dict(),
        "assumptions": assumptions,
        "prover": {
            "name": PROVER_NAME,
            "version": PROVER_VERSION,
            "source_sha256": _prover_digest(),
            "front_end": "python ast (@triton.jit helpers inlined)",
        },
        "z3_version": z3.get_version_string(),
        "python": platform.python_version(),
        "result": result.to_dict(),
    }


def _also_record(files: tuple) -> dict:
    """``{units.ALSO_RECORD: {file: SHA-256}}`` for a proof that also read the kernel files ``files``
    (a fused kernel's imports and op-by-op path); nothing for a one-file proof, whose record
    keeps its earlier form."""
    return {U.ALSO_RECORD: U.also_sources(files)} if files else {}


def certify(
    out_dir: Path | str | None = None,
    models=("tiny", "llama-3-8b"),
    kinds=("linear", "rows", "attention", "fused"),
    select: str = "",
    specs: list[Spec] | None = None,
    source_path: Path | str | None = None,
) -> list[dict]:
    """Prove every selected specialization; write one JSON certificate each to ``out_dir``
    (when given) plus ``summary.json``; return the certificates."""
    t0 = time.perf_counter()
    specs = specs if specs is not None else all_specs(models, kinds)
    certs = []
    out = Path(out_dir) if out_dir else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        if select and select not in spec.name:
            continue
        result, path, sha = prove_spec(spec, source_path)
        cert = certificate(spec, result, path, sha)
        certs.append(cert)
        if out:
            (out / f"{spec.name}.json").write_text(json.dumps(cert, indent=1) + "\n")
    if out:
        summary = {
            "count": len(certs),
            "proved": sum(c["result"]["status"] == "proved" for c in certs),
            "wall_s": round(time.perf_counter() - t0, 2),
            "results": {c["specialization"]: c["result"]["status"] for c in certs},
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    return certs


def _previous_certificates(path: Path) -> dict[str, dict]:
    """The proved certificates of a unit's earlier record at `path`, by specialization name,
    each with its assumptions as {name: text} again (a record names the texts once)."""
    try:
        rec = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    texts = rec.get("assumptions", {})
    return {c["specialization"]: dict(c, assumptions={n: texts.get(n, "") for n in c["assumptions"]})
            for c in rec.get("certificates", [])
            if c.get("result", {}).get("status") == "proved"}  # fmt: skip


def reusable(previous: dict | None, spec) -> bool:
    """Whether an earlier certificate proves `spec` as it is today: proved, and the same kernel
    sources (SHA-256 of the kernel file and of every further file it was proved against), the
    same two launches and the same goal. Such a proof is the one the gate accepts for an
    unchanged unit, so a unit whose launch list changed re-proves only its new
    specializations (the prover version a certificate names stays its own)."""
    if previous is None:
        return False
    left, right = _launches(spec)
    return (
        previous.get("kernel_source_sha256") == U.source_sha256(U.KERNEL_DIR / spec.kernel_file)
        and previous.get(U.ALSO_RECORD, {}) == U.also_sources(spec.also_files)
        and _calls(previous.get("left_launch")) == _jsonable(left)
        and _calls(previous.get("right_launch")) == _jsonable(right)
        and previous.get("goal") == spec.goal.to_dict()
    )


def _calls(recorded) -> list:
    """Recorded kernel calls with `symbolic_axes` (a later field of KernelCall) at its default,
    the empty list, where a certificate made before the field has none: such proofs executed
    every program of every axis, which is what the empty list means."""
    if not isinstance(recorded, list):
        return []
    return [{**c, "symbolic_axes": c.get("symbolic_axes", [])} if isinstance(c, dict) else c
            for c in recorded]  # fmt: skip


def _specs_of(unit: dict) -> list:
    """A unit's specializations: a class unit's (symbolic shapes) or a concrete unit's."""
    return symbolic_unit_specs(unit) if unit.get("symbolic") else unit_specs(unit)


def _specialization_of(unit: dict) -> dict:
    return U.symbolic_specialization(unit) if unit.get("symbolic") else U.specialization(unit)


def _shape_record(certs: list) -> dict:
    """``{units.SHAPE_RECORD: {symbol: [lo, hi]}}`` of a class unit's proofs (all the same
    bounds, checked); nothing for a concrete unit, whose record keeps its form."""
    shapes = {json.dumps(c["goal"].get("shape", {}), sort_keys=True) for c in certs}
    if shapes == {"{}"}:
        return {}
    if len(shapes) != 1:
        raise ValueError(f"the proofs of one class unit assume different shapes: {shapes}")
    return {U.SHAPE_RECORD: json.loads(shapes.pop())}


def _unit_certificates(unit: dict, previous: dict[str, dict], log) -> tuple[list, list]:
    """(certificates, names reused) for every specialization of `unit`."""
    certs, reused = [], []
    for spec in _specs_of(unit):
        old = previous.get(spec.name)
        if reusable(old, spec):
            certs.append(old)
            reused.append(spec.name)
            continue
        result, path, sha = prove_spec(spec)
        certs.append(certificate(spec, result, Path(path).name, sha))
        if log:
            log(f"{result.status:22s} {result.wall_s:7.2f}s  {spec.name}")
    return certs, reused


def certify_units(
    units: list[dict], out_dir: Path | str, log=None, reuse: bool = True
) -> list[dict]:
    """Prove every specialization of each unit; write ``<unit key>.json`` (the unit, its
    specialization as the engine launches it today, the kernel source SHA-256 and every
    certificate) to ``out_dir``. A specialization already proved in the unit's earlier record
    there (`reusable`) keeps its certificate unless `reuse` is False. Returns the unit records."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for unit in units:
        t0 = time.perf_counter()
        path = out / f"{unit['key']}.json"
        previous = _previous_certificates(path) if reuse else {}
        certs, reused = _unit_certificates(unit, previous, log)
        kfile = U.kernel_file(unit)
        assumptions = {}
        for c in certs:  # named once per unit (each certificate lists the names it rests on)
            assumptions.update(c["assumptions"])
            c["assumptions"] = sorted(c["assumptions"])
        record = {
            "unit": unit,
            "kernel_file": kfile.name,
            "kernel_source_sha256": U.source_sha256(kfile),
            **_also_record(U.also_files(unit)),
            **_shape_record(certs),
            "specialization": _specialization_of(unit),
            "specs": [c["specialization"] for c in certs],
            "results": {c["specialization"]: c["result"]["status"] for c in certs},
            "proved": all(c["result"]["status"] == "proved" for c in certs),
            "reused": reused,
            "wall_s": round(time.perf_counter() - t0, 2),
            "prover": {"name": PROVER_NAME, "version": PROVER_VERSION,
                       "source_sha256": _prover_digest()},
            "assumptions": assumptions,
            "certificates": certs,
        }  # fmt: skip
        path.write_text(json.dumps(record, indent=1) + "\n")
        records.append(record)
    return records
