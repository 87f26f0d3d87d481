"""`python -m samebits.analysis.engine_proof [--block-size N] [--only SUBSTR]`: discharge
every obligation and print one line each, then the counts (Z3's own solver time; measure wall
time with the shell's `time`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from samebits.analysis.engine_proof.prover import prove


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m samebits.analysis.engine_proof")
    parser.add_argument("--block-size", type=int, default=None, help="default: symbolic")
    parser.add_argument("--only", default="", help="obligations whose name contains this")
    args = parser.parse_args(argv)
    report = prove(args.block_size, only=args.only)
    for outcome in report.outcomes:
        print(f"{outcome.status:8s} {outcome.name} {outcome.counterexample}".rstrip())
    total = len(report.outcomes)
    print(f"{report.proved}/{total} obligations proved, Z3 time {report.z3_seconds:.2f} s")
    return 0 if report.proved == total else 1


if __name__ == "__main__":
    sys.exit(main())
