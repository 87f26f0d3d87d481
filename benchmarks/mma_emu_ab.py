"""The native MMA emulator against an earlier revision of itself, in one process: the same
inputs through both libraries (`sb_mma_chain`, w decoded inside the call), their bits
compared, k16 steps per CPU-second of each (CPU time: the figure that holds on a loaded
machine). The baseline is `git show REV:src/samebits/kernels/cpu/mma_emu.c` compiled with
native.py's compiler and flags beside this tree's sbpool.c.

    python benchmarks/mma_emu_ab.py --rev 7cb54b3 --out mma_emu_ab.json
Evidence class: measurement (and a bitwise comparison of the two on these inputs).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from samebits.kernels.cpu import mma_cases, mma_emu, native  # noqa: E402

CPU = ROOT / "src" / "samebits" / "kernels" / "cpu"
_P, _L = ctypes.c_void_p, ctypes.c_long


def baseline(rev: str, tmp: Path) -> ctypes.CDLL:
    """The revision's emulator as its own library."""
    src = subprocess.run(["git", "show", f"{rev}:src/samebits/kernels/cpu/mma_emu.c"],
                         cwd=ROOT, capture_output=True, text=True, check=True).stdout  # fmt: skip
    (tmp / "mma_emu.c").write_text(src)
    out = tmp / "baseline.so"
    cmd = [native._compiler(), *native.CFLAGS, f"-I{CPU}", str(tmp / "mma_emu.c"),
           str(CPU / "sbpool.c"), "-o", str(out), "-lm"]  # fmt: skip
    subprocess.run(cmd, check=True)
    lib = ctypes.CDLL(str(out))
    lib.sb_mma_chain.argtypes = [_P, _L, _P, _L, _L, _P, _P, _L, _L]
    lib.sb_mma_chain.restype = ctypes.c_int
    return lib


def timed(lib: ctypes.CDLL, x, w, threads: int, repeat: int) -> tuple[np.ndarray, float]:
    """Output bits and the best CPU seconds of `repeat` calls."""
    out = np.empty((x.shape[0], w.shape[0]), np.uint32)
    best = float("inf")
    for _ in range(repeat):
        c0 = time.process_time()
        rc = lib.sb_mma_chain(x.ctypes.data, x.shape[0], w.ctypes.data, w.shape[0], x.shape[1],
                              None, out.ctypes.data, 0, threads)  # fmt: skip
        best = min(best, time.process_time() - c0)
        assert rc == 0
    return out, best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rev", default="7cb54b3", help="baseline revision (default: session 14's)")
    p.add_argument("--m", type=int, default=64)
    p.add_argument("--n", type=int, default=512)
    p.add_argument("--ks", default="256,4096")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--out", default="mma_emu_ab.json")
    a = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        base, new = baseline(a.rev, Path(tmp)), mma_emu.library()
        for k in map(int, a.ks.split(",")):
            x, w, _ = mma_cases.make_case("normal", a.m, a.n, k, np.random.default_rng(k))
            x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
            got_base, t_base = timed(base, x, w, a.threads, a.repeat)
            got_new, t_new = timed(new, x, w, a.threads, a.repeat)
            steps = a.m * a.n * (k // 16)
            rows.append({"K": k, "M": a.m, "N": a.n, "threads": a.threads,
                         "same_bits": bool(np.array_equal(got_base, got_new)),
                         "baseline_steps_per_cpu_s": round(steps / t_base),
                         "steps_per_cpu_s": round(steps / t_new),
                         "speedup": round(t_base / t_new, 2)})  # fmt: skip
            print(json.dumps(rows[-1]), flush=True)
    Path(a.out).write_text(json.dumps({"baseline_rev": a.rev, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
