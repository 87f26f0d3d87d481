"""Human-readable description of the Triton kernels and their static configuration.

Used by ``samebits info``: one line per op naming the kernel and the facts that fix its
numerics (the facts that may change bits if changed), then the launch choices that do not.
An op named in `fingerprint.LAUNCH_ONLY_OPS` holds only launch choices certified to change
no bit: the fingerprint covers it, the numerics id does not (`fingerprint.numerics_components`),
so retuning a launch keeps earlier audit logs verifiable.
"""

from __future__ import annotations

from samebits.kernels.triton.attention import DECODE_MAXNREG, KEY_BLOCK
from samebits.kernels.triton.attention_meta import (
    ATTENTION_WARPS,
    DECODE_BLOCK_M,
    PREFILL_BLOCK_M,
    SPLIT_FEW_PROGRAMS,
    SPLIT_STAGES,
    SPLIT_WARPS,
    WIDE_BLOCK_M,
    WIDE_MIN_QUERY,
    WIDE_STAGES,
    WIDE_WARPS,
)
from samebits.kernels.triton.launches import COLUMN_TABLE, NARROW_ROWS, SPLIT_TABLE, WIDE_N
from samebits.kernels.triton.splitplan import MIN_STEPS_PER_RANGE, SPLIT_CANDIDATES, SplitPlan


def describe_plan(plan: SplitPlan) -> str:
    """One line for one weight's split plan."""
    return (
        f"[{plan.n}x{plan.k}] S={plan.splits} ranges of {plan.range_k} "
        f"(BK={plan.block_k}, fp32 chains, summed in range order)"
    )


def _cell(row) -> str:
    _, kind, bm, bn, w, st, g = row
    return f"{kind} {bm}x{bn}/w{w}/s{st}" + (f"/g{g}" if g > 1 else "")


def _launch_table(table) -> str:
    rows = ", ".join(f"M<={row[0]}:{_cell(row)}" for row in table[:-1])
    return f"{rows}, larger:{_cell(table[-1])}"


def _narrow_rows() -> str:
    return ", ".join(f"M<={m}:{_cell(row)}" for m, row in sorted(NARROW_ROWS.items()))


def describe() -> dict[str, str]:
    """One line per op: kernel and static config (numerics first, launch choices after)."""
    return {
        "linear": (
            "triton split-plan linear: splits per role "
            f"{dict(SPLIT_CANDIDATES)} (>= {MIN_STEPS_PER_RANGE} BK steps per range), BK=64 "
            "(32 if K<64), tl.dot fp32 accumulate; launches by M: S=1 "
            f"{_launch_table(COLUMN_TABLE)} (N<{WIDE_N}: {_narrow_rows()}); "
            f"S>1 {_launch_table(SPLIT_TABLE)}; tma rows run as pointer loads without TMA"
        ),
        "rms_norm": "triton row program (also add_rms_norm, head_rms_norm): block=next_pow2(width), "
        "warps=min(8,max(1,block//256)), tl.sum of squares, div_rn/sqrt_rn; after the split-K "
        "grid of o/down the ordered sum of the partials runs in the add_rms_norm program "
        "(sum_add_rms_norm: same arithmetic, one launch; evidence: test, certificate)",
        "rope": "triton token program: rotate-half, fp32, elementwise; without q/k norms fused "
        "with the qkv split and the K/V store (qkv_rope_store: one program per token, the same "
        "RoPE expression, K/V to the token's slot; evidence: test, certificate)",
        "silu_mul": "triton (row, 1024-column block) program: div_rn(g, 1 + softexp(-g))*u "
        "fp32, elementwise; softexp = the software exp of _row_kernels.py (fixed fma sequence, "
        "no ex2.approx; CPU replay: replay.softexp)",
        "gelu_mul": "triton (row, 1024-column block) program (Gemma's GeGLU, _gelu_kernel.py): "
        "div_rn(g, 1 + softexp(fma(-q, g, 0)))*u, q = fma(g*g, K2, K1), fp32, elementwise; "
        "softexp as silu_mul's",
        "attention": (
            f"triton paged attention: key tiles of {KEY_BLOCK} at absolute positions, online "
            "softmax in tile order, denominators by MMA (p @ ones), guarded rows, ex2q "
            "(_softexp2.py: x on a 2^-12 grid, then ex2.approx.ftz, a table on the CPU), "
            "l = fma(l, alpha, sum), acc = dot(p, v, acc * alpha), "
            "no fp fusion, interior key tiles unmasked; CPU replay: replay.attention"
        ),
        "attention_launch": (
            f"block_m {DECODE_BLOCK_M} (decode) / {WIDE_BLOCK_M} on {WIDE_WARPS} warps, "
            f"{WIDE_STAGES} stages (a query "
            f"of {WIDE_MIN_QUERY}+ tokens) / {PREFILL_BLOCK_M} on {ATTENTION_WARPS} warps "
            f"(otherwise), sequential decode launches of head dim <= 128 capped at "
            f"{DECODE_MAXNREG} registers, split-KV span launches on {SPLIT_WARPS} warps, no "
            f"cap, {SPLIT_STAGES} stages up to {SPLIT_FEW_PROGRAMS} programs, GQA rows packed "
            "(token, head) (no bit changes: tile height and packing "
            "are certificate goals, warps, stages and the cap a test; fingerprint, not numerics id)"
        ),
    }
