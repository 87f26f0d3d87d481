"""The attention's exponential on the SFU with a CPU definition (issue 25, prefill): the
evidence for `ex2q` and what it buys. ``ex2q(x) = ex2.approx.ftz.f32(((x * 4096 + S) - S) /
4096)`` (S = 1.5 * 2^23: x rounded to a multiple of 2^-12, ties to even; `_softexp2.ex2q`, shipped
2026-12-07) is four instructions against the software `softexp2`'s 15. Its bits are a CPU table
lookup because the GPU's ex2.approx.ftz at multiples of 2^-12 is 2^floor(x) times a function of
frac(x) alone (4,096 mantissas, `kernels/replay/ex2q.py`). This probe measures, on the GPU:

1. ``structure``: ex2.approx.ftz.f32 at every multiple of 2^-12 in [-127, 0]: how many
   outputs differ from ldexp(M[frac index], floor(x)), M its outputs on [0, 1); M's SHA-256
   and its 4,096 values (hex) in the JSON, and whether it is the committed table
   (`replay.ex2q.TABLE_SHA256`); the flush-to-zero boundary; then the shipped ``ex2q`` on 2.5M
   inputs against its CPU definition (`replay.ex2q.ex2q`). (Run before ex2q shipped, this probe
   carried its own copies of the kernel functions and of the numpy model.)
2. ``prefill``: the shipped kernel beside its form with the software exponential
   (`softexp2_nonpos` substituted for `ex2q` in the shipped source, a temporary module) and SDPA
   flash at the plan's launch, and their largest output difference (a sanity check, not bits:
   the two compute different definitions). Run before ex2q shipped, "prefill" compared the
   other way round (RESULTS.md, 2026-12-07, "Third call").

    python benchmarks/ex2_probe.py --out $OUT/ex2_probe.json      # GPU
    python benchmarks/ex2_probe.py --sass                         # CPU: tile-loop sizes
Evidence class: measurement.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from samebits.kernels.replay.ex2q import GRID, LOW, TABLE_SHA256  # noqa: E402
from samebits.kernels.replay.ex2q import ex2q as ex2q_cpu  # noqa: E402
from samebits.kernels.triton._softexp2 import ex2q  # noqa: E402
from samebits.kernels.triton.mma_probe import ex2_grid_kernel  # noqa: E402

KERNEL = Path(__file__).resolve().parent.parent / "src/samebits/kernels/triton/_attention_kernel.py"
LENGTHS = (4096, 8192, 32768)


@triton.jit
def _ex2q_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + i, ex2q(tl.load(x_ptr + i, mask=i < n, other=0.0)), mask=i < n)


def inputs():
    """Uniform [-130, 0], tiny negatives by exponent, specials."""
    import numpy as np

    rng = np.random.default_rng(0)
    wide = rng.uniform(-130.0, 0.0, 2_000_000)
    tiny = -np.exp2(rng.uniform(-149.0, 8.0, 500_000))
    special = [0.0, -0.0, -np.inf, np.nan, -1024.0, -3072.5, -126.0, -127.0, -1e30]
    return np.concatenate([wide, tiny, special]).astype(np.float32)


def random_check() -> dict:
    """`_softexp2.ex2q` on the GPU against `replay.ex2q.ex2q` (the committed table) on the CPU,
    as int32 views."""
    import numpy as np
    import torch

    x = inputs()
    xd = torch.from_numpy(x).cuda()
    out = torch.empty_like(xd)
    _ex2q_kernel[(triton.cdiv(x.size, 1024),)](xd, out, x.size, BLOCK=1024, enable_fp_fusion=False)
    got = out.cpu().numpy().view(np.int32)
    bad = np.flatnonzero(got != ex2q_cpu(x).view(np.int32))
    return {"inputs": int(x.size), "mismatches": int(bad.size),
            "first": [[float(x[i]), int(got[i])] for i in bad[:8]]}  # fmt: skip


def structure() -> dict:
    """ex2.approx.ftz at k / GRID for k in [LOW * GRID, 0]: the frac-table model's mismatches."""
    import numpy as np
    import torch

    k0, n = LOW * GRID, -LOW * GRID + 1
    out = torch.empty(n, dtype=torch.float32, device="cuda")
    ex2_grid_kernel[(triton.cdiv(n, 1024),)](out, k0, n, BLOCK=1024, enable_fp_fusion=False)
    y = out.cpu().numpy()
    k = np.arange(k0, k0 + n)
    floor, j = np.floor_divide(k, GRID), np.mod(k, GRID)
    table = np.empty(GRID, dtype=np.float32)
    table[j[floor == -1]] = y[floor == -1] * np.float32(2.0)  # M on [0, 1) from [-1, 0)
    model = np.ldexp(table[j].astype(np.float64), floor).astype(np.float32)
    model[model < np.finfo(np.float32).tiny] = 0.0  # ftz
    bad = np.flatnonzero(model.view(np.int32) != y.view(np.int32))
    zero = k[y == 0.0]
    return {"inputs": int(n), "mismatches": int(bad.size),
            "first_mismatches": [[float(k[i]) / GRID, float(y[i]), float(model[i])] for i in bad[:8]],
            "largest_flushed_x": float(zero.max()) / GRID if zero.size else None,
            "table_sha256": hashlib.sha256(table.tobytes()).hexdigest(),
            "table_is_the_committed_one": hashlib.sha256(table.tobytes()).hexdigest() == TABLE_SHA256,
            "table_hex": table.view(np.uint32).astype(np.uint32).tolist() if not bad.size else [],
            "max_rel_error_vs_exp2": float(np.max(np.abs(table / np.exp2(np.arange(GRID) / GRID) - 1))),
            "ex2q_vs_cpu_model": random_check()}  # fmt: skip


def software_exp_module():
    """The shipped kernel module with its `ex2q` bound to the software `softexp2_nonpos` (the
    exponential before 2026-12-07), through a temporary file: what the SFU's ex2 buys."""
    from prefill_probe import module_from_text

    src = KERNEL.read_text().replace(
        "from samebits.kernels.triton._softexp2 import ex2q",
        "from samebits.kernels.triton._softexp2 import softexp2_nonpos as ex2q")  # fmt: skip
    return module_from_text(src, "softexp2_attention")


def prefill_cell(length: int, software) -> dict:
    """The shipped kernel (ex2q), its software-exponential form and SDPA flash on one prompt
    at the plan's launch."""
    import numpy as np
    from gpu_ops import HEAD_DIM, NUM_HEADS, NUM_KV_HEADS, make_paged_kv, randn, sdpa_reference
    from prefill_probe import launch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from samebits.kernels.triton._attention_kernel import paged_attention_kernel
    from samebits.kernels.triton.attention_meta import attention_metadata

    kv = make_paged_kv(1, length, seed=length)
    q = randn((length, NUM_HEADS, HEAD_DIM), kv.k_cache.dtype, seed=3)
    meta = attention_metadata(np.arange(length), np.array([0, length]), kv.tables, 16,
                              NUM_HEADS // NUM_KV_HEADS, "cuda")  # fmt: skip
    runs = {name: (lambda fn=fn: launch(fn, q, kv.k_cache, kv.v_cache, meta, HEAD_DIM**-0.5, 0, {}))
            for name, fn in (("shipped", paged_attention_kernel),
                             ("softexp2", software.paged_attention_kernel))}  # fmt: skip
    diff = (runs["shipped"]().float() - runs["softexp2"]().float()).abs().max().item()
    ms = {name: round(triton.testing.do_bench(run), 3) for name, run in runs.items()}
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        sdpa, _ = sdpa_reference(
            q.transpose(0, 1).unsqueeze(0).contiguous(), kv.k_ref, kv.v_ref, True
        )
        ms["sdpa_flash"] = round(triton.testing.do_bench(sdpa), 3)
    return {"length": length, "tile": [meta.block_m, meta.num_warps], "ms": ms,
            "softexp2_max_abs_diff_to_shipped": diff}  # fmt: skip


def sass_report(software) -> dict:
    from prefill_issue_bound import SIGNATURE, loops_with_mma, prefill_consts, sass_of

    from samebits.kernels.triton._attention_kernel import paged_attention_kernel

    consts = {**prefill_consts(), "BLOCK_M": 128}
    return {name: [len(x) for x in loops_with_mma(sass_of(fn, SIGNATURE, consts, 8))]
            for name, fn in (("shipped", paged_attention_kernel),
                             ("softexp2", software.paged_attention_kernel))}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sass", action="store_true", help="CPU: tile-loop sizes only")
    p.add_argument("--out", default="ex2_probe.json")
    a = p.parse_args()
    software = software_exp_module()
    if a.sass:
        doc: dict = {"tile_loop_instructions_bm128_w8": sass_report(software)}
    else:
        from gpu_ops import machine_info

        doc = {"machine": machine_info(), "structure": structure(),
               "prefill": [prefill_cell(n, software) for n in LENGTHS]}  # fmt: skip
    print(json.dumps({k: v for k, v in doc.items() if k != "structure"}, indent=1))
    if "structure" in doc:
        print(json.dumps({k: v for k, v in doc["structure"].items() if k != "table_hex"}))
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
