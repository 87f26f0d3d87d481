"""Prove the GPU kernels' certificates for a model (`samebits certify`), or check a directory.

    samebits certify --model llama-3-8b --out DIR     # prove, write DIR/<unit>.json
    samebits certify --check DIR [--model M]          # verify against the kernel sources now
    samebits certify --shipped                        # refresh the certificates in the package

`--model` is a preset name (samebits.model.presets.PRESETS; `tiny-test:<arch>` names the
preset tiny-test-<arch>, tests/tiny_models.py's checkpoint), a HF model folder or its
config.json, a GGUF file, or `smollm2` (the embedded default model); repeatable. Without
it: the models the shipped set covers (SHIPPED_MODELS).
Then `export SAMEBITS_CERTIFICATES=DIR` for `build_deployment(..., device="cuda")`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# the shipped set: the presets and test models the GPU tests deploy
SHIPPED_MODELS = ("llama-3-8b", "qwen3-8b", "tiny-test:llama", "tiny-test:qwen2", "tiny-test:qwen3",
                  "tiny-llama", "tiny-qwen3", "tiny-qwen2", "smollm2", "qwen3-30b-a3b",
                  "mixtral-8x7b", "tiny-test:qwen3_moe", "tiny-test:qwen3_moe_mixed",
                  "tiny-test:mixtral", "tiny-test:gemma3_text")  # fmt: skip


def add_certify_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", action="append", default=None,
                   help="preset name, HF folder, config.json, GGUF file or smollm2 (repeatable)")  # fmt: skip
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="prove and write the certificates to this directory")
    g.add_argument("--check", help="verify the certificates in this directory")
    g.add_argument("--shipped", action="store_true",
                   help="prove and write the package's shipped certificate set")  # fmt: skip
    p.add_argument("--jobs", type=int, default=1, help="units proved in parallel (processes)")
    p.add_argument("--force", action="store_true",
                   help="prove every unit, also those whose certificate is valid, and every "
                   "specialization (no earlier proof reused)")  # fmt: skip


def model_dims(spec: str) -> dict:
    from samebits.kernels.triton.certified.units import dims_of

    if spec.startswith("tiny-test:"):  # tests/tiny_models.py's checkpoint of an architecture
        spec = "tiny-test-" + spec.split(":", 1)[1]
    if spec.startswith("random:"):  # a random-weight model's name: random:<preset>:seed<n>
        spec = spec.split(":")[1]
    if spec == "smollm2":  # the embedded default model
        from samebits.model.loader import default_model_path

        spec = str(default_model_path())
    path = Path(spec)
    if path.suffix == ".gguf" and path.is_file():
        from samebits.model.gguf_loader import gguf_config

        return dims_of(gguf_config(path))
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        from samebits.model.config import model_config_from_hf

        return dims_of(model_config_from_hf(json.loads(path.read_text())))
    from samebits.model.presets import PRESETS

    if spec not in PRESETS:
        raise ValueError(f"--model {spec!r}: not a preset ({sorted(PRESETS)}) nor a HF folder")
    return dims_of(PRESETS[spec])


def units_of(models) -> list[dict]:
    from samebits.kernels.triton.certified.units import units_for

    out, seen = [], set()
    for m in models:
        for u in units_for(model_dims(m)):
            if u["key"] not in seen:
                seen.add(u["key"])
                out.append(u)
    return out


def _prove_one(args):
    unit, out, reuse = args
    from samebits.analysis.kernel_prover.certify import certify_units

    rec = certify_units([unit], out, reuse=reuse)[0]
    return unit["key"], rec["proved"], rec["wall_s"], rec["results"]


def certify_main(args: argparse.Namespace) -> int:
    from samebits.kernels.triton.certified import gate

    models = args.model or list(SHIPPED_MODELS)
    if args.check:
        d = Path(args.check)
        if args.model:
            units = units_of(models)
        else:
            units = [json.loads(f.read_text())["unit"] for f in sorted(d.glob("*.json"))]
        if not units:
            print(f"samebits certify: no certificates in {d}", file=sys.stderr)
            return 1
        res = gate.check(units, d)
        bad = 0
        for key, problem in res["units"].items():
            print(
                f"{'ok' if problem is None else 'INVALID':8s} {key}"
                + (f": {problem}" if problem else "")
            )
            bad += problem is not None
        print(f"{len(units) - bad}/{len(units)} valid; digest {res['digest']}")
        return 1 if bad else 0
    out = gate.SHIPPED_DIR if args.shipped else Path(args.out)
    units = units_of(models)
    if not args.force:  # a unit whose certificate there is valid today is not proved again
        stale = [u for u in units if gate.check_unit(u, out)[0] is not None]
        print(f"{len(units) - len(stale)} units already valid in {out} (--force proves them again)")
        units = stale
    jobs = [(u, str(out), not args.force) for u in units]
    if args.jobs > 1:
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(args.jobs) as pool:
            results = list(pool.map(_prove_one, jobs))
    else:
        results = []
        for j in jobs:
            results.append(_prove_one(j))
            k, ok, wall, _ = results[-1]
            print(f"{'proved' if ok else 'FAILED':8s} {wall:8.1f}s  {k}", flush=True)
    bad = [r for r in results if not r[1]]
    if args.jobs > 1:
        for k, ok, wall, _ in results:
            print(f"{'proved' if ok else 'FAILED':8s} {wall:8.1f}s  {k}")
    for k, _, _, res in bad:
        print(f"  {k}: " + ", ".join(n for n, st in res.items() if st != "proved"), file=sys.stderr)
    print(f"{len(results) - len(bad)}/{len(results)} units proved "
          f"-> {out}")  # fmt: skip
    return 1 if bad else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="samebits certify", description=__doc__)
    add_certify_arguments(p)
    return certify_main(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
