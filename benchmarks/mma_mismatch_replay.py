"""Study the mismatches of a benchmarks/mma_validate.py run on any CPU: regenerate each cell's
inputs from its seed, check the emulator still gives the saved emulator bits, and find which
MmaModel switches (single ones and pairs) give the GPU's bits for the saved outputs.

Usage: python benchmarks/mma_mismatch_replay.py RUN.json [--cells N]
(RUN_mismatches.npz beside RUN.json). Prints one line per cell with mismatches and a JSON
summary: per switch set, how many saved mismatching outputs it explains (bits equal).
"""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import fields
from pathlib import Path

import numpy as np

from samebits.kernels.cpu import mma_cases, mma_emu
from samebits.kernels.cpu.mma_model import MmaModel

SWITCHES = [f.name for f in fields(MmaModel)]
CANDIDATES = [()] + [(s,) for s in SWITCHES] + list(itertools.combinations(SWITCHES, 2))


def pair_bits(x, w, acc, rows, cols, model: MmaModel) -> np.ndarray:
    """The chain of the (row, col) pairs only: one output each."""
    out = np.empty(len(rows), np.uint32)
    for n, (i, j) in enumerate(zip(rows, cols, strict=True)):
        out[n] = mma_emu.chain_bits(x[i : i + 1], w[j : j + 1], acc[i : i + 1, j : j + 1], model)[
            0, 0
        ]
    return out


def replay(cell: dict, saved: np.lib.npyio.NpzFile) -> dict:
    i = cell["index"]
    rows, cols = saved[f"c{i}_rows"], saved[f"c{i}_cols"]
    gpu, emu = saved[f"c{i}_gpu"], saved[f"c{i}_emu"]
    rng = np.random.default_rng(cell["seed"])
    x, w, acc = mma_cases.make_case(cell["kind"], cell["M"], cell["N"], cell["K"], rng)
    same = bool(np.array_equal(pair_bits(x, w, acc, rows, cols, MmaModel()), emu))
    explained = {}
    for names in CANDIDATES:
        model = MmaModel(**{n: True for n in names})
        explained["+".join(names) or "default"] = int(
            (pair_bits(x, w, acc, rows, cols, model) == gpu).sum()
        )
    return {"index": i, "kind": cell["kind"], "K": cell["K"], "saved": len(rows),
            "emulator_reproduced": same, "explained": explained}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--cells", type=int, default=40, help="at most this many cells")
    args = ap.parse_args()
    run = json.loads(args.run.read_text())
    saved = np.load(args.run.with_name(args.run.stem + "_mismatches.npz"))
    cells = [c for c in run["cells"] if c["mismatches"]][: args.cells]
    results = []
    for cell in cells:
        results.append(replay(cell, saved))
        r = results[-1]
        best = max(r["explained"].items(), key=lambda kv: kv[1])
        print(f"{r['kind']:>13} K={r['K']:<5} saved {r['saved']}: emulator reproduced "
              f"{r['emulator_reproduced']}; best {best[0]} explains {best[1]}", flush=True)  # fmt: skip
    print(json.dumps(results))


if __name__ == "__main__":
    main()
