"""Fail-closed gating of the GPU plan on kernel certificates (no solver needed).

A deployment of the invariant GPU plan needs, for every certification unit of its model (see
``units.py``), a certificate ``<unit key>.json`` in the certificate directory whose proofs all
succeeded, whose kernel source SHA-256s are those of the kernel files now (the unit's file and
the further files a fused unit was proved against), and whose specialization
(split plan and launches, row-kernel constexprs, attention tile constants) is what the engine
launches now. The directory is ``$SAMEBITS_CERTIFICATES`` when set, else the certificates
shipped with the package (``certified/certificates/``). ``SAMEBITS_ALLOW_UNCERTIFIED=1``
runs anyway, announced on stderr and recorded in the fingerprint as "uncertified".
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

from samebits.kernels.triton.certified import units as U

ENV_DIR = "SAMEBITS_CERTIFICATES"
ENV_ALLOW = "SAMEBITS_ALLOW_UNCERTIFIED"
SHIPPED_DIR = Path(__file__).resolve().parent / "certificates"


class UncertifiedKernelError(RuntimeError):
    """The GPU plan would launch a kernel specialization without a valid certificate."""


def certificate_dir() -> Path:
    env = os.environ.get(ENV_DIR)
    return Path(env) if env else SHIPPED_DIR


def check_unit(unit: dict, directory: Path) -> tuple[str | None, str | None]:
    """``(problem, file digest)``: problem is None when the unit's certificate is valid, or,
    for a unit of a shape class (``units.symbolic_unit``), its class certificate is."""
    problem, digest = _check_own(unit, directory)
    if problem is None:
        return None, digest
    sym = U.symbolic_unit(unit)
    if sym is None:
        return problem, digest
    if not (Path(directory) / f"{sym['key']}.json").exists():
        return problem + (f" (nor its class certificate {sym['key']})"
                          if problem == "missing" else ""), digest  # fmt: skip
    cproblem, cdigest = check_class(unit, sym, Path(directory))
    if cproblem is None:
        return None, cdigest
    return (cproblem, cdigest) if problem == "missing" else (f"{problem}; {cproblem}", digest)


def _check_own(unit: dict, directory: Path) -> tuple[str | None, str | None]:
    """The unit's own certificate ``<unit key>.json``."""
    path = Path(directory) / f"{unit['key']}.json"
    if not path.exists():
        return "missing", None
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        rec = json.loads(raw)
    except ValueError:
        return "unreadable", digest
    if rec.get("unit", {}).get("key") != unit["key"]:
        return "names another unit", digest
    if not rec.get("proved") or not rec.get("results"):
        bad = [n for n, st in rec.get("results", {}).items() if st != "proved"]
        return f"not proved ({', '.join(bad[:3]) or 'no proofs'})", digest
    if not all(c.get("result", {}).get("status") == "proved" for c in rec.get("certificates", [])):
        return "not proved (a certificate's result)", digest
    changed = _changed_sources(unit, rec)
    if changed:
        return f"stale: {', '.join(changed)} changed since it was proved", digest
    if unit.get("symbolic"):  # a class unit's record itself (`samebits certify --check`)
        problem = _class_problem(unit, unit, rec, None)
        return (problem, digest) if problem else (None, digest)
    if rec.get("specialization") != U.specialization(unit):
        return "stale: the launches / constexprs the engine uses changed", digest
    if _stale_reference(rec):
        return "stale: certified/reference.py (the op-by-op path) changed", digest
    return None, digest


def check_class(unit: dict, sym: dict, directory: Path) -> tuple[str | None, str | None]:
    """``(problem, file digest)`` of the class certificate ``sym`` (``units.symbolic_unit``)
    for the concrete ``unit``: proved, kernel sources unchanged, the class specialization the
    engine launches today, and the unit's shape inside the bounds every proof assumed."""
    path = Path(directory) / f"{sym['key']}.json"
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()
    try:
        rec = json.loads(raw)
    except ValueError:
        return f"class certificate {sym['key']}: unreadable", digest
    problem = _class_problem(unit, sym, rec)
    return (f"class certificate {sym['key']}: {problem}" if problem else None), digest


def _class_problem(unit: dict, sym: dict, rec: dict, value: int | None = 0) -> str | None:
    """What is wrong with class ``sym``'s record for ``unit`` (None: valid); ``value``: the
    unit's shape integer (0: from ``unit``; None: the class unit itself, no shape to place)."""
    if rec.get("unit", {}).get("key") != sym["key"]:
        return "names another unit"
    if (
        not rec.get("proved")
        or not rec.get("certificates")
        or not all(c.get("result", {}).get("status") == "proved" for c in rec["certificates"])
    ):
        return "not proved"
    changed = _changed_sources(sym, rec)
    if changed:
        return f"stale: {', '.join(changed)} changed since it was proved"
    if rec.get("specialization") != U.symbolic_specialization(sym):
        return "stale: the launches / constexprs the engine uses changed"
    if _stale_reference(rec):  # a head class of the fused qkv kernel: the op-by-op path
        return "stale: certified/reference.py (the op-by-op path) changed"
    bounds = rec.get(U.SHAPE_RECORD) or {}
    goals = [c.get("goal", {}).get("shape") for c in rec["certificates"]]
    if not bounds or any(g != bounds for g in goals):
        return "its proofs do not state one symbolic shape"
    want = U.class_bounds(sym)
    if bounds != want:
        return f"its proofs assume {_fmt(bounds)}, the class is {_fmt(want)}"
    if value is None:
        return None
    values = U.shape_values(unit, sym)
    if values is None:
        return "the unit's plan breaks the class's constraints"
    for name, (lo, hi) in bounds.items():
        if not lo <= values[name] <= hi:
            return f"shape {values[name]} outside the proved range {lo}..{hi}"
    return None


def _fmt(bounds: dict) -> str:
    return ", ".join(f"{k} {lo}..{hi}" for k, (lo, hi) in sorted(bounds.items()))


def _changed_sources(unit: dict, rec: dict) -> list[str]:
    """The kernel files whose SHA-256 differs from the record's: the unit's kernel file, and
    for a unit proved against further files (``units.ALSO_FILES``: a fused kernel's imports
    and op-by-op path) each of those, as the record names them (``units.ALSO_RECORD``;
    absent in a one-file unit's record)."""
    kfile = U.kernel_file(unit)
    changed = [] if rec.get("kernel_source_sha256") == U.source_sha256(kfile) else [kfile.name]
    recorded = rec.get(U.ALSO_RECORD, {})
    today = U.also_sources(U.also_files(unit))
    return changed + sorted(f for f in set(recorded) | set(today)
                            if recorded.get(f) != today.get(f))  # fmt: skip


def _stale_reference(rec: dict) -> bool:
    """Whether a certificate proved against a reference path (certified/reference.py,
    the op-by-op path a fused kernel must equal) names another text than today's."""
    from samebits.kernels.triton.certified import reference

    for cert in rec.get("certificates", []):
        ref = cert.get("goal", {}).get("reference")
        if ref and ref.get("source_sha256") != reference.sha256():
            return True
    return False


def check(units: list[dict], directory: Path | str | None = None) -> dict:
    """Check every unit; returns {"directory", "units": {key: problem-or-None}, "digest"}.
    The digest is a SHA-256 over (unit key, certificate file SHA-256) of the valid units."""
    d = Path(directory) if directory else certificate_dir()
    problems, h = {}, hashlib.sha256()
    for unit in sorted(units, key=lambda u: u["key"]):
        problem, digest = check_unit(unit, d)
        problems[unit["key"]] = problem
        if problem is None:
            h.update(f"{unit['key']}:{digest}\n".encode())
    return {"directory": str(d), "units": problems, "digest": h.hexdigest()}


def how_to_fix(model_hint: str = "<model>") -> str:
    return (
        f"Generate them once with `samebits certify --model {model_hint} --out DIR` (CPU, needs "
        f"z3-solver: pip install 'samebits[test]'; minutes for an 8B model) and `export "
        f"{ENV_DIR}=DIR`; or, in the source tree, refresh the shipped set with `samebits "
        f"certify --shipped`. To run without certificates anyway: {ENV_ALLOW}=1 (recorded in "
        f"the fingerprint as uncertified)."
    )


def resolve(units: list[dict], problems: dict) -> tuple[dict, dict]:
    """``(bad, op_by_op)`` of a check's problems: a fused unit without a valid certificate
    whose op-by-op path (``units.op_by_op_units``) is certified goes to ``op_by_op`` (the engine
    runs that path instead: the same bits, one more launch); every other problem is bad."""
    bad, op_by_op = {}, {}
    for unit in units:
        problem = problems.get(unit["key"])
        if problem is None:
            continue
        path = U.op_by_op_units(unit)
        if path is not None and all(k in problems and problems[k] is None for k in path):
            op_by_op[unit["key"]] = problem
        else:
            bad[unit["key"]] = problem
    return bad, op_by_op


def gate(units: list[dict], model_hint: str = "<model>", stderr=None) -> dict:
    """The fingerprint component ``certificates`` of a GPU deployment; raises
    :class:`UncertifiedKernelError` (naming the missing / invalid units) unless every unit has
    a valid certificate, or is a fused unit whose op-by-op path has (``resolve``: listed under
    ``op_by_op``, announced on stderr; the deployment runs that path), or
    ``SAMEBITS_ALLOW_UNCERTIFIED=1``."""
    res = check(units)
    bad, op_by_op = resolve(units, res["units"])
    comp = {"status": "certified" if not bad else "uncertified", "digest": res["digest"],
            "units": sorted(res["units"])}  # fmt: skip
    if op_by_op:
        comp["op_by_op"] = sorted(op_by_op)
        _announce_op_by_op(op_by_op, stderr)
    if not bad:
        return comp
    lines = "\n".join(f"  {k}: {p}" for k, p in sorted(bad.items()))
    if os.environ.get(ENV_ALLOW) == "1":
        print(
            f"\n*** samebits: WARNING: {ENV_ALLOW}=1: deploying the GPU plan WITHOUT valid "
            f"kernel certificates for {len(bad)} of {len(res['units'])} units "
            f"(directory {res['directory']}):\n{lines}\n*** the fingerprint records this "
            "deployment as 'uncertified'.\n",
            file=stderr or sys.stderr,
            flush=True,
        )
        comp["problems"] = dict(sorted(bad.items()))
        return comp
    raise UncertifiedKernelError(
        f"the invariant GPU plan needs a valid kernel certificate for every kernel "
        f"specialization it launches; {len(bad)} of {len(res['units'])} are missing or invalid "
        f"in {res['directory']}:\n{lines}\n{how_to_fix(model_hint)}"
    )


def _announce_op_by_op(op_by_op: dict, stderr=None) -> None:
    lines = "\n".join(f"  {k}: {p}" for k, p in sorted(op_by_op.items()))
    print(f"samebits: note: {len(op_by_op)} fused launch(es) without a valid certificate run "
          f"op by op (their certified path; the same bits, one more launch each):\n{lines}",
          file=stderr or sys.stderr, flush=True)  # fmt: skip


def check_block_size(deployment, block_size: int, stderr=None) -> None:
    """An engine over a certified GPU deployment must use a KV page size the attention
    certificates cover (``units.ATTENTION_PAGES``): else :class:`UncertifiedKernelError`, or
    with ``SAMEBITS_ALLOW_UNCERTIFIED=1`` a banner (the page size changes no bits, so the
    fingerprint does not name it). Deployments without a certificate component pass."""
    comp = getattr(deployment, "components", {}).get("certificates")
    if not comp or block_size in U.ATTENTION_PAGES:
        return
    msg = (f"KV block size {block_size}: the attention kernel's certificates cover block sizes "
           f"{list(U.ATTENTION_PAGES)} (page-layout invariance is proved per page size)")  # fmt: skip
    if os.environ.get(ENV_ALLOW) == "1":
        print(f"\n*** samebits: WARNING: {ENV_ALLOW}=1: {msg}; running uncertified.\n",
              file=stderr or sys.stderr, flush=True)  # fmt: skip
        return
    raise UncertifiedKernelError(
        f"{msg}. Use block_size 16 or 32 (--block-size), or {ENV_ALLOW}=1."
    )


def check_rows_bound(deployment, rows: int, stderr=None) -> None:
    """An engine over a certified GPU deployment must launch at most ``units.M_MAX`` rows
    (the int32 obligations of the class certificates assume it): ``rows`` is the most a step
    launches (max_num_batched_tokens, max_num_seqs). Else :class:`UncertifiedKernelError`, or
    with ``SAMEBITS_ALLOW_UNCERTIFIED=1`` a banner. Deployments without certificates pass."""
    comp = getattr(deployment, "components", {}).get("certificates")
    if not comp or rows <= U.M_MAX:
        return
    msg = (f"{rows} rows per step: the class certificates' int32 obligations are proved for "
           f"launches of at most {U.M_MAX} rows")  # fmt: skip
    _refuse(msg, "Lower max_num_batched_tokens", stderr)


def check_attention_bounds(deployment, max_model_len: int, num_kv_blocks: int,
                           stderr=None) -> None:  # fmt: skip
    """An engine over a certified GPU deployment must stay within the bounds the attention
    certificates' int32 obligations assume (``units.ATTENTION_BOUNDS``): positions below
    POS_MAX (``max_model_len <= POS_MAX``) and block-table entries below BLOCKS_MAX. Else
    :class:`UncertifiedKernelError`, or with ``SAMEBITS_ALLOW_UNCERTIFIED=1`` a banner."""
    comp = getattr(deployment, "components", {}).get("certificates")
    b = U.ATTENTION_BOUNDS
    if not comp or (max_model_len <= b["POS_MAX"] and num_kv_blocks <= b["BLOCKS_MAX"]):
        return
    msg = (f"max_model_len {max_model_len}, num_kv_blocks {num_kv_blocks}: the attention "
           f"certificates' int32 obligations are proved for max_model_len <= {b['POS_MAX']} "
           f"and num_kv_blocks <= {b['BLOCKS_MAX']}")  # fmt: skip
    _refuse(msg, "Lower max_model_len or the KV cache size", stderr)


def _refuse(msg: str, hint: str, stderr=None) -> None:
    """Refuse (`UncertifiedKernelError`), or with the opt-out print the banner and return."""
    if os.environ.get(ENV_ALLOW) == "1":
        print(f"\n*** samebits: WARNING: {ENV_ALLOW}=1: {msg}; running uncertified.\n",
              file=stderr or sys.stderr, flush=True)  # fmt: skip
        return
    raise UncertifiedKernelError(f"{msg}. {hint}, or {ENV_ALLOW}=1.")


def certificate_lines(deployment) -> list[str]:
    """Lines for `samebits info`: the certificate status of the deployment's GPU plan."""
    comp = getattr(deployment, "components", {}).get("certificates")
    if not comp:
        return []
    out = [f"kernel certificates: {comp['status']} ({len(comp['units'])} units, "
           f"digest {comp['digest'][:16]})"]  # fmt: skip
    problems, op_by_op = comp.get("problems", {}), set(comp.get("op_by_op", ()))
    for key in comp["units"]:
        state = "not launched: runs op by op (certified)" if key in op_by_op else "proved"
        out.append(f"  {key}: {problems.get(key) or state}")
    return out
