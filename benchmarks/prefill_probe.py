"""Prefill attention launches that compute the shipped kernel's bits (issue 25: the prefill is
instruction-bound, `prefill_issue_bound.py`): launch options (tile height, warps, pipeline
stages, register cap), and the kernel before the interior tiles and the shorter exponential
as a baseline, all bits-checked against the shipped launch and timed beside SDPA flash.

    python benchmarks/prefill_probe.py --out $OUT/prefill_probe.json     # GPU: bits + time
    python benchmarks/prefill_probe.py --sass                             # CPU: tile loops

The baseline is an earlier `_attention_kernel.py` at ``--baseline`` (default
``.baseline/_attention_kernel.py``, git-ignored, carried to the device: ``git show
31820d3:src/samebits/kernels/triton/_attention_kernel.py > .baseline/_attention_kernel.py``);
without it the run has no "previous" row. On the GPU: each cell compares every launch's
output with the shipped launch's as int16 views, then times it (triton.testing.do_bench).
`--sass` compiles the kernels for sm_90 on this machine (Triton's bundled ptxas) and counts
the instructions of their key-tile loops. Evidence class: measurement (bits: the comparison
in the run).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
from pathlib import Path

import triton

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

LENGTHS = (8192, 32768)
SHORT_LENGTHS = (1024, 2048, 4096)  # where the 128-row launch starts (WIDE_MIN_QUERY)
BASELINE = Path(__file__).resolve().parent.parent / ".baseline" / "_attention_kernel.py"
# (name, kernel: "shipped" or "previous", tile height, launch options); tile height and launch
# options change no bit (the certificates' tile-height goal; warps and stages reorder nothing)
VARIANTS = (
    ("shipped", "shipped", None, {}),  # the plan's default launch for the cell
    ("previous", "previous", None, {}),
    ("bm64", "shipped", 64, {"num_warps": 4}),
    ("bm64_s2", "shipped", 64, {"num_warps": 4, "num_stages": 2}),
    ("bm128_w8", "shipped", 128, {"num_warps": 8}),
    ("bm128_w8_s2", "shipped", 128, {"num_warps": 8, "num_stages": 2}),
    ("bm128_w8_s4", "shipped", 128, {"num_warps": 8, "num_stages": 4}),
    ("bm128_w4", "shipped", 128, {"num_warps": 4}),
)


def load_baseline(path: Path):
    """The module at `path` (an earlier `_attention_kernel.py`), or None where it is absent."""
    return load_module(path, "previous_attention_kernel") if path.is_file() else None


def load_module(path: Path, name: str):
    """The Python module in file `path`, imported as `name`."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def module_from_text(text: str, name: str):
    """A module from source text, through a temporary file (Triton compiles a kernel from its
    file's source)."""
    path = Path(tempfile.mkdtemp()) / f"{name}.py"
    path.write_text(text)
    return load_module(path, name)


def launch(kernel, q, k_cache, v_cache, meta, scale: float, window: int, options: dict):
    """`kernel` (a paged attention kernel's signature) at the plan's launch, with options."""
    import torch

    from samebits.kernels.triton import attention as A

    out = torch.empty_like(q)
    hkv, d = k_cache.shape[1], k_cache.shape[2]
    opts = {"num_warps": meta.num_warps, **A.sequential_options(meta.block_m, d), **options}
    kernel[(meta.num_programs, hkv)](
        q, k_cache, v_cache, out, meta.positions, meta.prog_req, meta.prog_row0, meta.query_end,
        meta.block_tables, meta.block_tables.shape[1], scale * A.LOG2E,
        window or A.FULL_WINDOW, HKV=hkv,
        GROUP=meta.group, D=d, PAGE=meta.block_size, BLOCK_M=meta.block_m, BLOCK_N=A.KEY_BLOCK,
        SPAN=meta.span, enable_fp_fusion=A.FP_FUSION, **opts)  # fmt: skip
    return out


def _runners(variants, previous, q, kv, metas, scale, window) -> dict:
    """Name -> no-argument call of each variant whose kernel is present."""
    from samebits.kernels.triton._attention_kernel import paged_attention_kernel

    kernels = {"shipped": paged_attention_kernel}
    if previous is not None:
        kernels["previous"] = previous.paged_attention_kernel
    runs = {}
    for name, kernel, block_m, options in variants:
        if kernel in kernels:
            meta = metas(block_m, options.get("num_warps"))
            args = (kernels[kernel], q, kv.k_cache, kv.v_cache, meta, scale, window, options)
            runs[name] = lambda args=args: launch(*args)
    return runs


def cell(length: int, window: int, start: int, previous, variants=VARIANTS) -> dict:
    """Queries start..length-1 of one prompt of `length` keys (start > 0: a chunk after cached
    keys): each variant's bits against the shipped launch, then its time beside SDPA flash
    (start 0, no window)."""
    import numpy as np
    import torch
    from gpu_ops import HEAD_DIM, NUM_HEADS, NUM_KV_HEADS, make_paged_kv, randn, sdpa_reference

    from samebits.kernels.triton.attention import attention_metadata

    kv = make_paged_kv(1, length, seed=length)
    q = randn((length - start, NUM_HEADS, HEAD_DIM), kv.k_cache.dtype, seed=3)
    scale = HEAD_DIM**-0.5

    def metas(block_m: int | None, num_warps: int | None):
        return attention_metadata(np.arange(start, length), np.array([0, length - start]),
                                  kv.tables, 16, NUM_HEADS // NUM_KV_HEADS, "cuda",
                                  block_m=block_m, num_warps=num_warps)  # fmt: skip

    runs = _runners(variants, previous, q, kv, metas, scale, window)
    ref = runs["shipped"]().view(torch.int16)
    row: dict = {"length": length, "window": window, "start": start, "bits_equal": {}, "ms": {}}
    for name, run in runs.items():
        try:
            row["bits_equal"][name] = bool(torch.equal(ref, run().view(torch.int16)))
            row["ms"][name] = triton.testing.do_bench(run)
        except Exception as exc:  # a launch that does not compile or fit: recorded, run goes on
            row["ms"][name] = f"error: {type(exc).__name__}: {str(exc)[:200]}"
    if start == 0 and not window:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        qs = q.transpose(0, 1).unsqueeze(0).contiguous()
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            sdpa, row["sdpa_kind"] = sdpa_reference(qs, kv.k_ref, kv.v_ref, True)
            row["ms"]["sdpa"] = triton.testing.do_bench(sdpa)
    return row


def tile_loops(fn, signature: dict, consts: dict) -> list[int]:
    """Instruction counts of the loops holding HGMMA of `fn` compiled for sm_90."""
    from prefill_issue_bound import WARPS, loops_with_mma, sass_of

    return [len(ops) for ops in loops_with_mma(sass_of(fn, signature, consts, WARPS))]


def sass_report(previous) -> dict:
    from prefill_issue_bound import SIGNATURE, prefill_consts

    from samebits.kernels.triton._attention_kernel import paged_attention_kernel

    kernels = {"shipped": paged_attention_kernel}
    if previous is not None:
        kernels["previous"] = previous.paged_attention_kernel
    return {name: tile_loops(k, SIGNATURE, prefill_consts()) for name, k in kernels.items()}


def ncu_target(length: int) -> None:
    """The plan's default launch on one `length`-token prompt, run twice (the first compiles;
    ncu profiles the second: `--launch-skip 1`)."""
    import torch

    cell(length, 0, 0, None, variants=VARIANTS[:1])
    torch.cuda.synchronize()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sass", action="store_true", help="CPU: key-tile loop sizes only")
    p.add_argument("--baseline", type=Path, default=BASELINE)
    p.add_argument("--out", default="prefill_probe.json")
    p.add_argument("--ncu-target", type=int, metavar="N",
                   help="GPU: the plan's launch on an N-token prompt, twice (for ncu)")  # fmt: skip
    a = p.parse_args()
    previous = load_baseline(a.baseline)
    if a.ncu_target:
        return ncu_target(a.ncu_target)
    if a.sass:
        doc: dict = {"tile_loop_instructions": sass_report(previous)}
    else:
        from gpu_ops import machine_info

        small = [v for v in VARIANTS if v[0] in ("shipped", "previous")]
        cells = [cell(n, 0, 0, previous) for n in LENGTHS]
        short = [v for v in VARIANTS if v[0] in ("shipped", "bm64", "bm128_w8", "bm128_w8_s2")]
        cells += [cell(n, 0, 0, previous, short) for n in SHORT_LENGTHS]
        cells += [cell(8192, 4096, 0, previous, small), cell(8192, 0, 6000, previous, small)]
        doc = {"machine": machine_info(), "rows": cells}
    print(json.dumps(doc, indent=1))
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
