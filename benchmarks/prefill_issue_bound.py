"""Issue 25, prefill: how far the span kernel's instruction stream alone keeps it from SDPA
flash. Compiles `paged_attention_kernel` for sm_90 on the CPU (Triton's bundled ptxas,
nvdisasm; the plan's prefill launch: Llama-3-8B heads, D 128, BLOCK_M 64, BLOCK_N 64, 4
warps, pointers 16-byte aligned as at run time), counts the SASS instructions of the key-tile
loop by opcode, and turns the count into the time the warp schedulers need just to issue
them for one 8k / 32k causal prefill (every SM issuing one instruction per scheduler per
cycle at the boost clock: a lower bound, not a prediction). No GPU needed.

`--decode`: the same count for the split-KV decode span kernel (`split_span_kernel`, the plan's
launch at batch 16 x 16k: `attention.split_options`), its three key-tile loops (masked head,
interior, masked tail), and the share of the schedulers' issue slots its interior loop needs
per key tile while the SM streams its share of the H200's HBM bandwidth. `--shapes`: the same
loops at batch 1 x 4k (the plan's launch there: 64 programs) beside the launch shapes of
`split_probe_shapes.py` (head-dim slices, scores first, HND pages), each loop's instruction
count per warp and the opcodes that lengthen a tile's chain (MMAs, exponentials, barriers,
shuffles).

    python benchmarks/prefill_issue_bound.py --out benchmarks/results/prefill_issue_bound.json
Evidence class: measurement (of the compiled binary) and arithmetic.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

H200 = {"sms": 132, "schedulers": 4, "boost_ghz": 1.98, "hbm_gbps": 4800}  # NVIDIA's H200 SXM
HEADS, KV_HEADS, D, BLOCK_M, BLOCK_N, WARPS = 32, 8, 128, 64, 64, 4
# the exponential's instructions per element (`_softexp2.py`'s docstring: 2 clamps, 3 adds,
# 6 fma, 5 integer operations, 1 multiply, a compare and a select)
SOFTEXP2_OPS = 19
SIGNATURE = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "o_ptr": "*bf16",
             "pos_ptr": "*i32", "req_ptr": "*i32", "row0_ptr": "*i32", "qend_ptr": "*i32",
             "bt_ptr": "*i32", "bt_stride": "i32", "qk_scale": "fp32", "window": "i32",
             "HKV": "constexpr", "GROUP": "constexpr", "D": "constexpr", "PAGE": "constexpr",
             "BLOCK_M": "constexpr", "BLOCK_N": "constexpr", "SPAN": "constexpr"}  # fmt: skip
DECODE_BATCH = 16  # requests of the decode launch surveyed (`--decode`), at 16k of context
DECODE_PTRS = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "pos_ptr": "*i32",
               "bt_ptr": "*i32"}  # fmt: skip


def prefill_consts() -> dict:
    """The constexprs of the plan's prefill launch of the 8B shape."""
    return {"HKV": KV_HEADS, "GROUP": HEADS // KV_HEADS, "D": D, "PAGE": 16,
            "BLOCK_M": BLOCK_M, "BLOCK_N": BLOCK_N, "SPAN": 512}  # fmt: skip


def sass_of(fn, signature: dict, consts: dict, warps: int, options: dict | None = None) -> str:
    """`fn` compiled for sm_90 on this machine (pointers 16-byte aligned), disassembled."""
    import triton

    from samebits.kernels.triton import aot
    from samebits.kernels.triton.attention import FP_FUSION

    opts = {"num_warps": warps, "enable_fp_fusion": FP_FUSION, **(options or {})}
    k = aot.compile_sm90(fn, signature, consts, opts)
    cubin = Path("/tmp/samebits_prefill.cubin")
    cubin.write_bytes(k.asm["cubin"])
    nvdisasm = Path(triton.__file__).parent / "backends/nvidia/bin/nvdisasm"
    return subprocess.run([str(nvdisasm), "-c", str(cubin)], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def compile_sass() -> str:
    from samebits.kernels.triton import _attention_kernel as K

    return sass_of(K.paged_attention_kernel, SIGNATURE, prefill_consts(), WARPS)


def loops_with_mma(sass: str, mma: str = "HGMMA") -> list[list[str]]:
    """The opcodes of every loop (a block between a label and a backward branch to it) that
    holds ``mma`` instructions (a key tile's MMAs), innermost first (shortest first)."""
    lines = sass.splitlines()
    labels = {m.group(1): i for i, ln in enumerate(lines) if (m := re.match(r"(\.L_x_\d+):", ln))}
    found = []
    for i, ln in enumerate(lines):
        m = re.search(r"BRA `\((\.L_x_\d+)\)", ln)
        if m and labels.get(m.group(1), i) < i:
            body = lines[labels[m.group(1)] : i + 1]
            ops = [o.group(1) for b in body if (o := re.search(
                r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)", b))]  # fmt: skip
            if mma in ops:
                found.append(ops)
    return sorted(found, key=len)


def tile_loop(sass: str) -> list[str]:
    """The opcodes of the innermost key-tile loop (the shortest loop holding HGMMA)."""
    loops = loops_with_mma(sass)
    return loops[0] if loops else []


def issue_bound_ms(tokens: int, per_tile: int) -> float:
    """Warp-instructions of one causal prefill of ``tokens`` over the schedulers' issue rate."""
    group = HEADS // KV_HEADS
    programs = tokens * group // BLOCK_M
    tiles = sum(-(-((p + 1) * BLOCK_M // group) // BLOCK_N) for p in range(programs))
    warp_insts = tiles * KV_HEADS * WARPS * per_tile
    rate = H200["sms"] * H200["schedulers"] * H200["boost_ghz"] * 1e9
    return warp_insts / rate * 1e3


def decode_sass() -> str:
    """The split span kernel as the plan launches it at batch DECODE_BATCH x 16k (its programs
    per request from `attention.DECODE_SPLIT_PROGRAMS`, as `attention.decode_splits`)."""
    from samebits.kernels.triton import _attention_kernel as K
    from samebits.kernels.triton import aot, attention

    fn = K.split_span_kernel
    consts = {**prefill_consts(), "BLOCK_M": attention.DECODE_BLOCK_M}
    sig = aot.signature(fn, DECODE_PTRS, consts, ["qk_scale"])
    pairs = DECODE_BATCH * KV_HEADS
    programs = pairs * -(-attention.DECODE_SPLIT_PROGRAMS // pairs)
    opts = attention.split_options(programs)
    return sass_of(fn, sig, consts, opts.pop("num_warps"), opts)


CHAIN_OPS = ("HMMA", "MUFU", "BAR", "SHFL", "LDSM", "LDS", "LDGSTS", "LDG")


def shapes_report() -> dict:
    """Instructions per warp of each key-tile loop (masked head, interior, masked tail) and
    the chain opcodes of the interior one, for the shipped span kernel at batch 1 x 4k and
    for the `split_probe_shapes` launches on the same options."""
    import split_probe_shapes as S

    from samebits.kernels.triton import _attention_kernel as K
    from samebits.kernels.triton import aot, attention

    base = {**prefill_consts(), "BLOCK_M": attention.DECODE_BLOCK_M}
    opts = attention.split_options(KV_HEADS * 8)  # batch 1 x 4k: 8 spans x 8 KV heads
    kernels = [("shipped", K.split_span_kernel, base),
               ("dslice64", S.split_shape_kernel, {**base, "DV": 64, "HND": False, "TMA": 0}),
               ("dslice32", S.split_shape_kernel, {**base, "DV": 32, "HND": False, "TMA": 0}),
               ("scored", S.split_scored_kernel, base),
               ("hnd", S.split_shape_kernel, {**base, "DV": D, "HND": True, "TMA": 0})]  # fmt: skip
    # (the TMA forms of `split_shape_kernel` are left out: its TMA waits' spin loops sit after the function body
    # and branch back into it, so `loops_with_mma` cannot isolate its tile loop)
    doc: dict = {"options": opts}
    for name, fn, consts in kernels:
        sig = aot.signature(fn, {**DECODE_PTRS, "s_ptr": "*fp32"}, consts, ["qk_scale"])
        sig = {k: v for k, v in sig.items() if k in fn.arg_names}
        o = dict(opts)
        loops = loops_with_mma(sass_of(fn, sig, consts, o.pop("num_warps"), o), "HMMA")
        counts = collections.Counter(loops[0])
        doc[name] = {"loops_instructions": [len(x) for x in loops],
                     "interior_chain_ops": {op: counts.get(op, 0) for op in CHAIN_OPS}}  # fmt: skip
    return doc


def decode_report() -> dict:
    """The split kernel's key-tile loops by opcode (interior: the shortest, no masks) and the
    issue share of its interior loop at the HBM rate (one K and one V tile per iteration)."""
    from samebits.kernels.triton.attention_meta import SPLIT_WARPS

    loops = loops_with_mma(decode_sass(), "HMMA")
    tile_bytes = 2 * BLOCK_N * D * 2
    tile_s = tile_bytes / (H200["hbm_gbps"] * 1e9 / H200["sms"])
    warp_insts = SPLIT_WARPS * len(loops[0])  # one program's warps per key tile
    slots = H200["schedulers"] * H200["boost_ghz"] * 1e9 * tile_s
    return {"loops_instructions": [len(o) for o in loops],
            "interior_by_opcode": dict(collections.Counter(loops[0]).most_common()),
            "interior_issue_share_at_hbm_rate": round(warp_insts / slots, 3), "gpu": H200}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default="prefill_issue_bound.json")
    p.add_argument("--decode", action="store_true", help="the split-KV decode span kernel")
    p.add_argument("--shapes", action="store_true", help="batch 1 x 4k and the probe's shapes")
    a = p.parse_args()
    doc = shapes_report() if a.shapes else decode_report() if a.decode else prefill_report()
    print(json.dumps(doc, indent=1))
    Path(a.out).write_text(json.dumps(doc, indent=1) + "\n")


def prefill_report() -> dict:
    """The prefill key-tile loop by opcode, the exponential's share, the issue bound."""
    ops = tile_loop(compile_sass())
    counts = collections.Counter(ops)
    elements = BLOCK_M * BLOCK_N // (WARPS * 32)  # score elements per thread per tile
    doc = {"per_tile_instructions": len(ops), "by_opcode": dict(counts.most_common()),
           "score_elements_per_thread": elements,
           "softexp2_share": round(SOFTEXP2_OPS * elements / len(ops), 3),
           "issue_bound_ms": {str(t): round(issue_bound_ms(t, len(ops)), 3)
                              for t in (8192, 32768)}, "gpu": H200}  # fmt: skip
    return doc


if __name__ == "__main__":
    main()
