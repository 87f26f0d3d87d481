"""Prove the GPU kernels' certificates for a model (`samebits certify`), or check a directory.

    samebits certify --model llama-3-8b --out DIR     # prove, write DIR/<unit>.json
    samebits certify --check DIR [--model M]          # verify against the kernel sources now
    samebits certify --shipped                        # refresh the certificates in the package
    samebits certify --covers MODEL                   # no proving: is MODEL covered? (exit 0/1)

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
                  "tiny-test:mixtral", "published:qwen3-4b",
                  "tiny-test:gemma3_text")  # fmt: skip


# published shapes nobody deploys in the tests: the shipped set holds the certificates of
# their units of kinds ROW_CLASS_KINDS (row-kernel and linear classes: N and K symbolic, seconds
# to minutes each; the fused units per shape), so `--covers` names only what is missing beyond
# them
ROW_CLASS_MODELS = ("published:llama-3.2-3b", "published:qwen2.5-7b",
                    "published:mistral-nemo-12b", "gemma-3-12b")  # fmt: skip
ROW_CLASS_KINDS = ("rows", "gelu", "linear", "fused")
# larger published shapes whose class units are shipped but not their fused units (those run
# op by op, `gate.resolve`): Qwen2.5-14B brings the fused qkv head class h33-64 kv8 d128
# (Qwen2.5-14B / 32B, Llama-3.1-70B). Not Qwen2.5-72B: its down projection (8192 x 29568)
# needs the row-parallel S = 2 K class (115 s to prove), and its bf16 weights (145 GB) fit no
# single GPU we deploy on, while a tensor-parallel shard launches other shapes
CLASS_ONLY_MODELS = ("published:qwen2.5-14b",)
CLASS_ONLY_KINDS = ("rows", "linear")
# the attention head classes shipped besides the models' own (KV heads symbolic, 1..HEADS_MAX):
# every GQA group 1..8 at the head dims 64, 128 and 256 (a stated set: the published dense and
# MoE models of Llama 3, Qwen 2.5 / 3, Mistral, Gemma 3, SmolLM2 fall in it); both launches
ATTENTION_GROUPS = tuple(range(1, 9))
ATTENTION_HEAD_DIMS = (64, 128, 256)


def attention_class_units() -> list[dict]:
    """One member unit per shipped attention head class (each launch): group g, one KV head."""
    out = []
    for d in ATTENTION_HEAD_DIMS:
        for g in ATTENTION_GROUPS:
            base = dict(kind="attention", heads=g, kv_heads=1, head_dim=d)
            out.append(dict(base, key=f"attention.h{g}.kv1.d{d}"))
            out.append(dict(base, key=f"attention.split_kv.h{g}.kv1.d{d}", launch="split"))
    return out


def rope_class_units() -> list[dict]:
    """One member unit per RoPE head class (`units.head_class`: heads in (2^(i-1), 2^i]) up
    to `units.HEADS_MAX`, at the head dims ATTENTION_HEAD_DIMS: any head count's RoPE, so a
    model whose fused qkv kernel has no certificate runs it op by op (`gate.resolve`)."""
    from samebits.kernels.triton.certified.units import HEADS_MAX, head_unit

    heads = [1 << i for i in range(HEADS_MAX.bit_length())]
    return [head_unit("rope", h, d) for d in ATTENTION_HEAD_DIMS for h in heads]


def shipped_units() -> list[dict]:
    """The units `--shipped` proves: every unit of SHIPPED_MODELS, the units of kinds
    ROW_CLASS_KINDS of ROW_CLASS_MODELS and CLASS_ONLY_KINDS of CLASS_ONLY_MODELS (proved as
    their class units where they have one), and
    the attention head classes of `attention_class_units` and the RoPE head classes of
    `rope_class_units`."""
    out = units_of(SHIPPED_MODELS)
    seen = {u["key"] for u in out}
    extra = [u for m in ROW_CLASS_MODELS for u in units_of([m]) if u["kind"] in ROW_CLASS_KINDS]
    extra += [u for u in units_of(CLASS_ONLY_MODELS) if u["kind"] in CLASS_ONLY_KINDS]
    for u in extra + attention_class_units() + rope_class_units():
        if u["key"] not in seen:
            seen.add(u["key"])
            out.append(u)
    return out


# kinds proved per shape even where a class exists: the fused unit's class proof (N symbolic
# through the split-K partials, the flat ordered sum and RMSNorm) takes minutes per
# specialization, its per-shape proof seconds; the gate accepts either certificate
PER_SHAPE_KINDS = ("fused",)


def add_certify_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", action="append", default=None,
                   help="preset name, HF folder, config.json, GGUF file or smollm2 (repeatable)")  # fmt: skip
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--out", help="prove and write the certificates to this directory")
    g.add_argument("--check", help="verify the certificates in this directory")
    g.add_argument("--shipped", action="store_true",
                   help="prove and write the package's shipped certificate set")  # fmt: skip
    g.add_argument("--covers", metavar="MODEL", action="append",
                   help="no proving, no GPU: exit 0 when the certificates ($SAMEBITS_CERTIFICATES"
                   " or the shipped set) cover every unit MODEL launches, else 1 naming the "
                   "missing ones (preset, HF folder, config.json or GGUF file; repeatable)")  # fmt: skip
    p.add_argument("--jobs", type=int, default=1, help="units proved in parallel (processes)")
    p.add_argument("--per-shape", action="store_true",
                   help="prove each unit at its own shape, not its shape class's certificate")  # fmt: skip
    p.add_argument("--force", action="store_true",
                   help="prove every unit, also those whose certificate is valid, and every "
                   "specialization (no earlier proof reused)")  # fmt: skip


def model_dims(spec: str) -> dict:
    from samebits.kernels.triton.certified.units import dims_of

    if spec.startswith("tiny-test:"):  # tests/tiny_models.py's checkpoint of an architecture
        spec = "tiny-test-" + spec.split(":", 1)[1]
    if spec.startswith("random:"):  # a random-weight model's name: random:<preset>:seed<n>
        spec = spec.split(":")[1]
    if spec.startswith("published:"):  # a published checkpoint's config (no weights)
        from samebits.analysis.published_shapes import ALL_PUBLISHED
        from samebits.model.config import model_config_from_hf

        name = spec.split(":", 1)[1]
        if name not in ALL_PUBLISHED:
            raise ValueError(f"model {spec!r}: published shapes are {sorted(ALL_PUBLISHED)}")
        return dims_of(model_config_from_hf(ALL_PUBLISHED[name]))
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
        raise ValueError(f"model {spec!r}: not a preset ({sorted(PRESETS)}) nor a HF folder")
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


def proof_units(units: list[dict], per_shape: bool = False) -> list[dict]:
    """The units to prove for ``units``: each one's class unit where it has one
    (`units.symbolic_unit`: one proof set for every shape of the class), else the unit;
    ``per_shape``: the units themselves."""
    from samebits.kernels.triton.certified.units import symbolic_unit

    out, seen = [], set()
    for u in units:
        sym = None if per_shape or u["kind"] in PER_SHAPE_KINDS else symbolic_unit(u)
        p = sym or u
        if p["key"] not in seen:
            seen.add(p["key"])
            out.append(p)
    return out


def _prove_one(args):
    unit, out, reuse = args
    from samebits.analysis.kernel_prover.certify import certify_units

    rec = certify_units([unit], out, reuse=reuse)[0]
    return unit["key"], rec["proved"], rec["wall_s"], rec["results"]


def covers_main(models: list[str], stdout=None) -> int:
    """`--covers`: check the units each model would launch against the certificate directory
    with the gate's own check (`gate.check`: validity, staleness, specialization); prints one
    line per unit that is not covered and a verdict per model. 0: all covered, 1: not."""
    from samebits.kernels.triton.certified import gate

    out = stdout or sys.stdout
    bad_models = 0
    for m in models:
        units = units_of([m])
        res = gate.check(units)
        bad, op_by_op = gate.resolve(units, res["units"])
        for key, problem in sorted(op_by_op.items()):
            print(f"OP BY OP {key}: {problem}; its op-by-op path is certified", file=out)
        for key, problem in sorted(bad.items()):
            print(f"NOT COVERED {key}: {problem}", file=out)
        verdict = "covered" if not bad else f"NOT covered ({len(bad)} units)"
        if op_by_op and not bad:
            verdict += f" ({len(op_by_op)} fused units run op by op)"
        certified = sum(p is None for p in res["units"].values())
        print(f"{m}: {verdict}: {certified}/{len(res['units'])} units certified in "
              f"{res['directory']}", file=out)  # fmt: skip
        bad_models += bool(bad)
    return 1 if bad_models else 0


def certify_main(args: argparse.Namespace) -> int:
    from samebits.kernels.triton.certified import gate

    if args.covers:
        return covers_main(args.covers)
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
    units = shipped_units() if args.shipped and not args.model else units_of(models)
    if not args.force:  # a unit whose certificate there is valid today is not proved again
        stale = [u for u in units if gate.check_unit(u, out)[0] is not None]
        print(f"{len(units) - len(stale)} units already valid in {out} (--force proves them again)")
        units = stale
    units = proof_units(units, args.per_shape)
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
