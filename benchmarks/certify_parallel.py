"""Certification on a many-core machine: every specialization of the given units proved in its
own process (one certificate file each, written as soon as it is proved, so a run cut short
keeps its work), then the unit records assembled from them exactly as `samebits certify`
writes them (`kernel_prover.certify.certify_units`).

    python benchmarks/certify_parallel.py plan --model M ... --jobs-file J   # the stale units' specs
    python benchmarks/certify_parallel.py prove --jobs-file J --out DIR [--procs N]
    python benchmarks/certify_parallel.py assemble --jobs-file J --from DIR [--into CERTDIR]

`plan` needs only the source tree (no z3); `prove` needs z3-solver; `assemble` writes records
only for units whose every specialization is in DIR (the others are listed).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path


def plan(models: list[str], jobs_file: Path) -> None:
    from samebits.analysis.certify_cli import units_of
    from samebits.analysis.kernel_prover.specs import unit_specs
    from samebits.kernels.triton.certified import gate

    units = [u for u in units_of(models) if gate.check_unit(u, gate.SHIPPED_DIR)[0] is not None]
    jobs = [{"unit": u, "specs": [s.name for s in unit_specs(u)]} for u in units]
    jobs_file.write_text(json.dumps(jobs, indent=1))
    print(f"{len(units)} stale units, {sum(len(j['specs']) for j in jobs)} specializations")


def _spec(unit: dict, name: str):
    from samebits.analysis.kernel_prover.specs import unit_specs

    return next(s for s in unit_specs(unit) if s.name == name)


def _prove_one(unit: dict, name: str, out: str) -> tuple[str, str, float]:
    C = importlib.import_module("samebits.analysis.kernel_prover.certify")

    spec = _spec(unit, name)
    result, path, sha = C.prove_spec(spec)
    cert = C.certificate(spec, result, Path(path).name, sha)
    (Path(out) / f"{name}.json").write_text(json.dumps(cert, indent=1) + "\n")
    return name, result.status, result.wall_s


def _cost(unit: dict) -> int:
    """Longest first: attention by head dim, then the rest."""
    return unit.get("head_dim", 0) * (4 if unit["kind"] == "attention" else 1)


def prove(jobs_file: Path, out: Path, procs: int, order: str = "cost") -> None:
    """`order` "cost": the longest units first; "file": the jobs file's order (priorities)."""
    out.mkdir(parents=True, exist_ok=True)
    jobs = json.loads(jobs_file.read_text())
    if order == "cost":
        jobs = sorted(jobs, key=lambda j: -_cost(j["unit"]))
    todo = [(j["unit"], n) for j in jobs for n in j["specs"] if not (out / f"{n}.json").exists()]
    print(f"{len(todo)} specializations on {procs} processes", flush=True)
    t0 = time.time()
    with ProcessPoolExecutor(procs) as pool:
        futures = [pool.submit(_prove_one, u, n, str(out)) for u, n in todo]
        for f in as_completed(futures):
            name, status, wall = f.result()
            print(f"{status:10s} {wall:8.1f}s  {name}  (+{time.time() - t0:.0f}s)", flush=True)


def assemble(jobs_file: Path, src: Path, into: Path) -> None:
    C = importlib.import_module("samebits.analysis.kernel_prover.certify")

    jobs = json.loads(jobs_file.read_text())
    done = [j for j in jobs if all((src / f"{n}.json").exists() for n in j["specs"])]
    for j in jobs:
        if j not in done:
            print(f"incomplete: {j['unit']['key']}")

    def from_files(unit, previous, log):
        names = next(j["specs"] for j in jobs if j["unit"]["key"] == unit["key"])
        return [json.loads((src / f"{n}.json").read_text()) for n in names], []

    C._unit_certificates = from_files  # the certificates proved by `prove`, not proved again
    records = C.certify_units([j["unit"] for j in done], into)
    for r in records:
        print(f"{'proved' if r['proved'] else 'FAILED':8s} {r['unit']['key']}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("step", choices=("plan", "prove", "assemble"))
    p.add_argument("--model", action="append", default=[])
    p.add_argument("--jobs-file", type=Path, required=True)
    p.add_argument("--out", type=Path)
    p.add_argument("--from", dest="src", type=Path)
    p.add_argument("--into", type=Path)
    p.add_argument("--procs", type=int, default=os.cpu_count())
    p.add_argument("--order", choices=("cost", "file"), default="cost")
    a = p.parse_args()
    if a.step == "plan":
        plan(a.model, a.jobs_file)
    elif a.step == "prove":
        prove(a.jobs_file, a.out, a.procs, a.order)
    else:
        from samebits.kernels.triton.certified import gate

        assemble(a.jobs_file, a.src, a.into or gate.SHIPPED_DIR)


if __name__ == "__main__":
    main()
