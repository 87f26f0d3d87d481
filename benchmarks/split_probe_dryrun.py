"""A CPU dry run of `split_decode_probe.py --floor`: one small cell (batch, context) through the
probe's own `cell()` on Triton's interpreter with the GPU semantics of
`kernels.replay.interpret` (the sm_90 MMA chain, ex2 table, fma), so the probe's host code
and its bit comparisons run before device time is spent on them. The probe's CUDA-only
pieces are stood in for here: tensors on the CPU, every timing one untimed call (0.01 ms),
and the PDL launch records the interpreter's error (it cannot run ``griddepcontrol``).

    python benchmarks/split_probe_dryrun.py 1 1536 [OUT.json]   # batch 1, context 1536

Prints the floors run (the TMA ones: ran, or their error), the PDL pair and each launch
shape's bits against the shipped launch.
Evidence class: test (of the probe; no timing means anything here).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from samebits.kernels.replay import interpret  # noqa: E402

interpret.numpy2_index()
interpret.gpu_semantics()
_EMPTY = torch.empty


def _empty(*shape, device=None, **kw):
    return _EMPTY(*shape, device="cpu" if device == "cuda" else device, **kw)


torch.empty = _empty  # the probe allocates its buffers on "cuda"

import gpu_ops  # noqa: E402
import split_decode_probe as P  # noqa: E402

from samebits.kernels.triton import attention as A  # noqa: E402


def randn(shape, dtype, scale: float = 1.0, seed: int = 0) -> torch.Tensor:
    """`gpu_ops.randn` on the CPU."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(tuple(shape), generator=g) * scale).to(dtype)


def make_paged_kv(batch: int, context: int, seed: int) -> gpu_ops.PagedKV:
    """`gpu_ops.make_paged_kv` on the CPU, without the contiguous references (unused here)."""
    blocks = -(-context // gpu_ops.BLOCK_SIZE)
    tables = np.random.default_rng(seed).permutation(batch * blocks).reshape(batch, blocks)
    shape = (batch * blocks * gpu_ops.BLOCK_SIZE, gpu_ops.NUM_KV_HEADS, gpu_ops.HEAD_DIM)
    k, v = randn(shape, torch.bfloat16, seed=seed), randn(shape, torch.bfloat16, seed=seed + 1)
    return gpu_ops.PagedKV(k, v, tables, None, None)


def main() -> None:
    batch, context = (int(a) for a in sys.argv[1:3])
    metadata = A.attention_metadata
    P.randn, P.make_paged_kv, P.hbm_gbps = randn, make_paged_kv, lambda: 3350.0
    P.bench_graph = lambda fn, rep: (fn(), 0.01)[1]
    A.attention_metadata = lambda *a, **kw: metadata(*a[:5], "cpu", *a[6:], **kw)
    row = P.cell(batch, context, merges=False, splits_too=False, floor=True)
    if len(sys.argv) > 3:  # a JSON as the probe writes it (for `split_probe_report.py`)
        Path(sys.argv[3]).write_text(json.dumps({"machine": "CPU dry run", "rows": [row]}))
    shapes = {k: v.get("bits_equal", v.get("error")) for k, v in row["shapes"].items()}
    tma = {k: v.get("error", "ran") for k, v in row["tma_floors"].items()}
    print(json.dumps({"splits": row["splits"], "floors": list(row["floors"]), "tma_floors": tma,
                      "pdl": row["pdl"], "shapes_bits_equal": shapes}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
