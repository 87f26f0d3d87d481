"""``python -m samebits.analysis.kernel_prover [--models tiny,llama-3-8b]
[--kinds linear,rows,attention,fused] [--select SUBSTR] [--source FILE] [--out DIR]``: prove and write
certificates (per specialization; `samebits certify` writes the per-unit sets the GPU plan
loads)."""

from __future__ import annotations

import argparse
import sys
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m samebits.analysis.kernel_prover")
    ap.add_argument("--models", default="tiny,llama-3-8b")
    ap.add_argument("--kinds", default="linear,rows,attention,fused")
    ap.add_argument("--select", default="", help="only specializations whose name contains this")
    ap.add_argument(
        "--source", default=None, help="kernel file to prove instead of the shipped one"
    )
    ap.add_argument("--out", default=None, help="directory for the JSON certificates")
    args = ap.parse_args(argv)

    from samebits.analysis.kernel_prover.certify import certify

    t0 = time.perf_counter()
    certs = certify(
        args.out,
        tuple(args.models.split(",")),
        tuple(args.kinds.split(",")),
        args.select,
        source_path=args.source,
    )
    bad = 0
    for c in certs:
        r = c["result"]
        print(f"{r['status']:22s} {r['wall_s']:7.2f}s  {c['specialization']}")
        if r["status"] != "proved":
            bad += 1
            print("   ", r["unsupported"] or r["counterexample"])
    print(f"{len(certs) - bad}/{len(certs)} proved in {time.perf_counter() - t0:.1f}s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
