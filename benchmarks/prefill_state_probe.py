"""What the prefill's second running state costs (issue 25; Nsight Compute: the kernel is
latency-bound at 255 registers, RESULTS "The 128-row prefill launch shipped..."): the shipped
sequential kernel holds the span's state (m_s, l_s, acc_s) and the merged one (m, l, acc).
This probe times, on prompts shorter than one span so both compute the same bits:

- `shipped_one_span`: the shipped kernel at SPAN = 2^20 (one span; both states still held);
- `one_state`: the same source with the span loop and merge removed (generated here from the
  shipped file by one text substitution, written to a temporary module), holding one state;
- `shipped`: the shipped kernel at the plan's span (other bits: the reference for time only).

Merging one span into the empty state is exact (fma(0, a, acc_s * 1) = acc_s), so the first
two must be bit-equal (checked as int16 views). Both launches at the plan's tile height and
warps; `--sass` compiles them for sm_90 on the CPU and reports registers and the key-tile loop.

    python benchmarks/prefill_state_probe.py --out $OUT/prefill_state_probe.json   # GPU
    python benchmarks/prefill_state_probe.py --sass                                # CPU
Evidence class: measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

KERNEL = Path(__file__).resolve().parent.parent / "src/samebits/kernels/triton/_attention_kernel.py"
ONE_SPAN = 1 << 20
LENGTHS = (4096, 8192, 32768)
SPAN_LOOP_START = "    for span0 in range(0, last + 1, SPAN):"
SPAN_LOOP_END = "    out = tl.math.div_rn(acc, l_i[:, None])"
ONE_STATE = """    m_i, l_i, acc = _attend_span(q, k_ptr, v_ptr, bt_row, 0, pos, lo, last, inner0, inner1,
                                 hk, qk_scale, HKV, D, PAGE, BLOCK_M, BLOCK_N, SPAN)
"""


def one_state_module():
    """The shipped kernel module with `paged_attention_kernel`'s span loop and merge replaced
    by one span's state (a temporary file: Triton compiles from source text)."""
    from prefill_probe import module_from_text

    src = KERNEL.read_text()
    i, j = src.index(SPAN_LOOP_START), src.index(SPAN_LOOP_END)
    return module_from_text(src[:i] + ONE_STATE + src[j:], "one_state_attention")


def cell(length: int, one_state) -> dict:
    """The three launches on one prompt: bits of the two one-span ones, then times."""
    import numpy as np
    import torch
    import triton
    from gpu_ops import HEAD_DIM, NUM_HEADS, NUM_KV_HEADS, make_paged_kv, randn
    from prefill_probe import launch

    from samebits.kernels.triton._attention_kernel import paged_attention_kernel
    from samebits.kernels.triton.attention_meta import ATTENTION_SPAN, attention_metadata

    kv = make_paged_kv(1, length, seed=length)
    q = randn((length, NUM_HEADS, HEAD_DIM), kv.k_cache.dtype, seed=3)

    def meta(span: int):
        return attention_metadata(np.arange(length), np.array([0, length]), kv.tables, 16,
                                  NUM_HEADS // NUM_KV_HEADS, "cuda", span=span)  # fmt: skip

    runs = {"shipped": (paged_attention_kernel, meta(ATTENTION_SPAN)),
            "shipped_one_span": (paged_attention_kernel, meta(ONE_SPAN)),
            "one_state": (one_state.paged_attention_kernel, meta(ONE_SPAN))}  # fmt: skip
    call = {k: (lambda k=k, v=v: launch(v[0], q, kv.k_cache, kv.v_cache, v[1], HEAD_DIM**-0.5,
                                        0, {})) for k, v in runs.items()}  # fmt: skip
    a, b = call["shipped_one_span"](), call["one_state"]()
    same = bool(torch.equal(a.view(torch.int16), b.view(torch.int16)))
    ms = {k: round(triton.testing.do_bench(f), 3) for k, f in call.items()}
    tile = [runs["shipped"][1].block_m, runs["shipped"][1].num_warps]
    return {"length": length, "tile": tile, "one_span_bits_equal": same, "ms": ms}


def sass_report(one_state) -> dict:
    """Registers, stack and key-tile loop lengths of both kernels (sm_90, the 8B prefill)."""
    from prefill_issue_bound import SIGNATURE, loops_with_mma, prefill_consts, sass_of

    from samebits.kernels.triton._attention_kernel import paged_attention_kernel

    out = {}
    for name, fn in (
        ("shipped", paged_attention_kernel),
        ("one_state", one_state.paged_attention_kernel),
    ):
        for bm, warps in ((64, 4), (128, 8)):
            consts = {**prefill_consts(), "BLOCK_M": bm, "SPAN": ONE_SPAN}
            sass = sass_of(fn, SIGNATURE, consts, warps)
            loops = [len(x) for x in loops_with_mma(sass)]
            out[f"{name}_bm{bm}_w{warps}"] = {"tile_loops": loops, **_resources()}
    return out


def _resources() -> dict:
    """REG and STACK of the last cubin `sass_of` wrote (cuobjdump -res-usage)."""
    import re
    import subprocess

    import triton

    tool = Path(triton.__file__).parent / "backends/nvidia/bin/cuobjdump"
    text = subprocess.run([str(tool), "-res-usage", "/tmp/samebits_prefill.cubin"],
                          capture_output=True, text=True, check=True).stdout  # fmt: skip
    return {k.lower(): int(v) for k, v in re.findall(r"(REG|STACK):(\d+)", text)[:2]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sass", action="store_true", help="CPU: registers and tile loops only")
    p.add_argument("--out", default="prefill_state_probe.json")
    a = p.parse_args()
    one_state = one_state_module()
    if a.sass:
        doc: dict = sass_report(one_state)
    else:
        from gpu_ops import machine_info

        doc = {"machine": machine_info(), "rows": [cell(n, one_state) for n in LENGTHS]}
    print(json.dumps(doc, indent=1))
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
