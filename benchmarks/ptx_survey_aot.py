"""PTX/SASS survey of the invariant plan's kernels compiled ahead of time for sm_90 on a CPU
(no GPU needed: Triton's bundled ptxas and cuobjdump), with representative Llama-3-8B-like
constexprs. The same counts as the survey of benchmarks/replay_linear_check.py (which takes
the kernels the H200 actually compiles); this one runs in CI-like environments.

Usage: PYTHONPATH=src python benchmarks/ptx_survey_aot.py --out survey.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
_spec = importlib.util.spec_from_file_location(
    "rlc", ROOT / "benchmarks" / "replay_linear_check.py"
)
rlc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(rlc)

FLOAT_ARGS = ("eps", "qk_scale")
# (module, kernel, pointer dtypes by name (default *fp32), constexprs, num_warps)
KERNELS = (
    ("_linear_kernels", "linear_ranges_kernel", {"x_ptr": "*bf16", "w_ptr": "*bf16", "y_ptr": "*bf16"},
     dict(RANGE_K=4096, SPLITS=1, HAS_BIAS=True, BLOCK_M=16, BLOCK_N=32, BLOCK_K=64), 4),
    ("_linear_kernels", "linear_partials_kernel", {"x_ptr": "*bf16", "w_ptr": "*bf16"},
     dict(RANGE_K=1024, BLOCK_M=16, BLOCK_N=32, BLOCK_K=64), 4),
    ("_linear_kernels", "ordered_sum_kernel", {"y_ptr": "*bf16"},
     dict(SPLITS=4, HAS_BIAS=True, BLOCK=1024), 4),
    ("_fused_kernels", "sum_add_rms_norm_kernel", {"out_ptr": "*bf16", "w_ptr": "*bf16"},
     dict(SPLITS=4, HAS_BIAS=False, WIDTH=4096, BLOCK=4096), 8),
    ("_row_kernels", "rms_norm_kernel", {"x_ptr": "*bf16", "out_ptr": "*bf16", "w_ptr": "*bf16"},
     dict(WIDTH=4096, BLOCK=4096, ADD_RESIDUAL=True), 8),
    ("_row_kernels", "silu_mul_kernel", {"gu_ptr": "*bf16", "out_ptr": "*bf16"},
     dict(INNER=14336, BLOCK=1024), 4),
    ("_gelu_kernel", "gelu_mul_kernel", {"gu_ptr": "*bf16", "out_ptr": "*bf16"},
     dict(INNER=15360, BLOCK=1024), 4),
    ("_row_kernels", "rope_kernel", {"x_ptr": "*bf16", "pos_ptr": "*i64"},
     dict(HEADS=32, HALF=64, BLOCK_H=32, BLOCK_D=128), 4),
    ("_attention_kernel", "paged_attention_kernel",
     {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16", "pos_ptr": "*i32",
      "req_ptr": "*i32", "row0_ptr": "*i32", "qend_ptr": "*i32", "bt_ptr": "*i32"},
     dict(HKV=8, GROUP=4, D=128, PAGE=16, BLOCK_M=64, BLOCK_N=64, SPAN=1024), 4),
    ("_attention_kernel", "merge_spans_kernel", {"o_ptr": "*bf16", "pos_ptr": "*i32"},
     dict(HKV=8, GROUP=4, D=128, BLOCK_M=64, SPAN=1024), 4),
)  # fmt: skip


def compile_one(module: str, name: str, ptrs: dict, consts: dict, warps: int) -> dict:
    from samebits.kernels.triton import aot

    fn = getattr(importlib.import_module(f"samebits.kernels.triton.{module}"), name)
    # the layouts (and so the reduction trees and vector loads) are those the GPU compiles
    sig = aot.signature(fn, ptrs, consts, FLOAT_ARGS)
    k = aot.compile_sm90(fn, sig, consts, {"num_warps": warps})
    sass = None
    tool = rlc._cuobjdump()
    if tool:
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(k.asm["cubin"])
            f.flush()
            proc = subprocess.run([tool, "--dump-sass", f.name], capture_output=True, text=True)
            sass = rlc._count(proc.stdout, rlc.SASS_PATTERNS) if proc.returncode == 0 else None
    return {"module": module, "constexprs": consts, "num_warps": warps,
            "ptx": rlc._count(k.asm["ptx"], rlc.PTX_PATTERNS), "sass": sass}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    kernels: dict[str, list] = {}
    for module, name, ptrs, consts, warps in KERNELS:
        try:
            kernels[name] = [compile_one(module, name, ptrs, consts, warps)]
        except Exception as exc:  # a signature guess off: say so, keep the others
            kernels[name] = [{"error": f"{type(exc).__name__}: {str(exc)[:300]}", "ptx": {},
                              "sass": None}]  # fmt: skip
        print(name, kernels[name][0].get("error") or kernels[name][0]["ptx"], flush=True)
    result = {"target": "sm_90 (ahead of time)", "kernels": kernels, "engines": [],
              "engine_error": "not run (AOT)"}  # fmt: skip
    Path(args.out).write_text(json.dumps(result, indent=1))
    rlc.print_survey(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
