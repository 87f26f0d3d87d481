"""Capture GPU bits of bf16 tl.dot chains that start from a zero accumulator (+0 or -0) on
products below 2^-126 (the `subnormal_out` operands), the case `mma_validate.py` left out (its
`subnormal_out` class starts from a subnormal accumulator), and the K = 64 linears' partials.

Usage (H200): ``PYTHONPATH=$PWD/src python benchmarks/mma_zero_acc_capture.py --out DIR``.
Writes ``zero_acc.npz``: for each (K, acc sign) the GPU output bits ``gpu|K|sign`` of
``mma_cases.make_case('subnormal_out', 256, 256, K, default_rng([7, K]))`` with its
accumulator replaced by zeros of that sign. The operands are regenerated offline from the seed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

KS = (16, 32, 64, 128, 256)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    import torch

    from samebits.kernels.cpu import mma_cases
    from samebits.kernels.triton import mma_probe

    arrays = {}
    for k in KS:
        x, w, _ = mma_cases.make_case("subnormal_out", 256, 256, k, np.random.default_rng([7, k]))
        for sign, word in (("pos", 0), ("neg", 0x80000000)):
            acc = np.full((256, 256), word, np.uint32)
            t = [torch.from_numpy(a.view(d)).cuda() for a, d in ((x, np.int16), (w, np.int16),
                                                                 (acc, np.int32))]  # fmt: skip
            for bm, nw in ((64, 4), (16, 4)):
                y = mma_probe.chain_bits(*t, block_m=bm, num_warps=nw)
                arrays[f"gpu|{k}|{sign}|bm{bm}"] = y.cpu().numpy().view(np.uint32)
    from samebits.kernels.splitplan import split_plan
    from samebits.kernels.triton.launches import Launch
    from samebits.kernels.triton.linear import split_partials

    i = sorted(mma_cases.KINDS).index("subnormal_out")
    for role, n in (("qkv", 128), ("lm_head", 320)):
        x, w, _ = mma_cases.make_case(
            "subnormal_out", 130, n, 64, np.random.default_rng([n, 64, i])
        )
        xt, wt = (torch.from_numpy(a.view(np.int16)).cuda().view(torch.bfloat16) for a in (x, w))
        p = split_partials(xt, wt, split_plan(n, 64, role), Launch("ranges", 64, 32, 4, 8, 1))
        arrays[f"partials|{role}{n}"] = (
            p.cpu().contiguous().view(torch.int32).numpy().view(np.uint32)
        )
    np.savez_compressed(Path(args.out) / "zero_acc.npz", **arrays)
    print({key: int((v != 0).sum()) for key, v in arrays.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())
