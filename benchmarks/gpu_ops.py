"""GPU kernel benchmark: each invariant Triton kernel against cuBLAS / torch SDPA (flash) /
torch ops, on Llama-3-8B shapes in bfloat16. One command, one run, GPU only.

Per cell: the invariant kernel's median time, the reference's median time, their ratio
(invariant / reference: > 1 means the invariant kernel is slower), and two checks made before
timing: the relative error against the reference (max |ours - ref| / max |ref|, must be below
2e-2) and row invariance (the bits of the first and last rows equal the same rows computed
alone, at M = 1; compared as integer views).

- linears qkv, o, gate_up, down, lm_head (M up to 512: it runs on sampled rows only) vs
  `torch.nn.functional.linear` (cuBLAS), at M = 1, 8, 32, 128, 512, 2048, 8192;
- attention prefill (one sequence of L tokens, paged KV with a shuffled block table) vs
  `scaled_dot_product_attention(is_causal=True)` with the flash backend; invariance: the first
  and last query computed alone;
- attention decode (B sequences of context C, one query each) vs SDPA flash on contiguous K/V;
  achieved GB/s of both (K and V bytes read over the time) against the measured copy bandwidth;
  invariance: sequences 0 and B-1 decoded alone;
- rms_norm, add_rms_norm, silu_mul vs unfused torch ops.

Timing: `triton.testing.do_bench(..., return_mode="median")`; it zeroes a 256 MB buffer before
every timed call, so each call starts with a cold L2 (no input rotation needed). Inputs are
random (never zeros).

    python benchmarks/gpu_ops.py            # full sweep (< 4 minutes on an H200)
    python benchmarks/gpu_ops.py --quick    # reduced sweep
    SAMEBITS_BENCH_GRAPH=1 python benchmarks/gpu_ops.py   # kernel time from CUDA graph
        replays (no host launch overhead; what an engine with CUDA graphs pays)
Writes JSON to $OUT/gpu_ops.json when OUT is set, else ./gpu_ops.json (`--out` overrides).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

# Llama-3-8B
LINEAR_SHAPES: dict[str, tuple[int, int]] = {
    "qkv": (6144, 4096),
    "o": (4096, 4096),
    "gate_up": (28672, 4096),
    "down": (4096, 14336),
    "lm_head": (128256, 4096),
}
HIDDEN = 4096
INTERMEDIATE = 14336
NUM_HEADS = 32
NUM_KV_HEADS = 8
HEAD_DIM = 128
BLOCK_SIZE = 16
RMS_EPS = 1e-5
REL_TOL = 2e-2
WARMUP_MS = 10
REP_MS = 30
NOMINAL_COPY_GBPS = 4300.0  # measured again at start-up (bytes read + written per second)


@dataclass(frozen=True)
class Sweep:
    """Which sizes one run covers."""

    ms: tuple[int, ...]
    lm_head_max_m: int
    prefill_lens: tuple[int, ...]
    decode_batches: tuple[int, ...]
    decode_contexts: tuple[int, ...]


FULL = Sweep(
    (1, 8, 32, 128, 512, 2048, 8192), 512, (512, 2048, 8192), (1, 8, 32, 128), (1024, 4096)
)
QUICK = Sweep((1, 32, 512, 4096), 512, (512, 4096), (1, 32), (4096,))


@dataclass
class Cell:
    """One measured (op, shape, M) point. Times in ms; `rate` in `rate_unit` (ours, ref)."""

    op: str
    shape: str
    m: int
    ours_ms: float | None = None
    ref_ms: float | None = None
    rel_err: float | None = None
    rows_equal: bool | None = None  # None: nothing to compare (M = 1)
    rate_unit: str = ""
    ours_rate: float | None = None
    ref_rate: float | None = None
    note: str = ""
    error: str | None = None

    @property
    def ratio(self) -> float | None:
        """Invariant time over reference time (> 1: the invariant kernel is slower)."""
        if not self.ours_ms or not self.ref_ms:
            return None
        return self.ours_ms / self.ref_ms

    @property
    def checks_ok(self) -> bool:
        """No error, relative error within REL_TOL, rows bitwise equal where compared."""
        err_ok = self.rel_err is not None and self.rel_err < REL_TOL
        return self.error is None and err_ok and self.rows_equal is not False

    def to_json(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "checks_ok": self.checks_ok}


# ---------------------------------------------------------------------------- summary (pure)
def geomean(values: Iterable[float]) -> float | None:
    """Geometric mean of positive values (None for none)."""
    logs = [math.log(v) for v in values]
    return math.exp(sum(logs) / len(logs)) if logs else None


def _ratios(cells: Sequence[Cell], ops: Iterable[str]) -> list[float]:
    wanted = set(ops)
    return [c.ratio for c in cells if c.op in wanted and c.ratio is not None]


def _label(cell: Cell) -> str:
    return f"{cell.op} {cell.shape} M={cell.m}"


def summarize(cells: Sequence[Cell]) -> dict:
    """Geomean ratios per group, the worst cell, and the checks that failed."""
    linear_ops = [f"linear {role}" for role in LINEAR_SHAPES]
    timed = [c for c in cells if c.ratio is not None]
    worst = max(timed, key=lambda c: c.ratio, default=None)
    linear_cells = [c for c in timed if c.op in linear_ops]
    worst_linear = max(linear_cells, key=lambda c: c.ratio, default=None)
    return {
        "linear_geomean_ratio": geomean(_ratios(cells, linear_ops)),
        "linear_geomean_ratio_by_role": {
            op: geomean(_ratios(cells, [op])) for op in linear_ops if _ratios(cells, [op])
        },
        "attention_prefill_ratio": geomean(_ratios(cells, ["attention prefill"])),
        "attention_decode_ratio": geomean(_ratios(cells, ["attention decode"])),
        "rows_geomean_ratio": geomean(_ratios(cells, ["rms_norm", "add_rms_norm", "silu_mul"])),
        "worst_cell": None if worst is None else {"cell": _label(worst), "ratio": worst.ratio},
        "worst_linear_cell": None
        if worst_linear is None
        else {"cell": _label(worst_linear), "ratio": worst_linear.ratio},
        "cells": len(cells),
        "failed_checks": [_label(c) for c in cells if not c.checks_ok and c.error is None],
        "errors": {_label(c): c.error for c in cells if c.error is not None},
    }


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _fmt_bits(value: bool | None) -> str:
    return {None: "-", True: "same", False: "DIFF"}[value]


TABLE_COLUMNS = (
    ("op", 18, "<"), ("shape", 22, "<"), ("M", 6, ">"), ("ours ms", 9, ">"),
    ("ref ms", 9, ">"), ("ratio", 7, ">"), ("rel err", 8, ">"), ("rows", 5, ">"),
    ("ours rate", 14, ">"), ("ref rate", 9, ">"), ("note", 0, "<"),
)  # fmt: skip


def _row(values: Sequence[str]) -> str:
    parts = [
        format(v, f"{align}{width}") if width else v
        for v, (_, width, align) in zip(values, TABLE_COLUMNS, strict=True)
    ]
    return "  ".join(parts).rstrip()


def format_table(cells: Sequence[Cell]) -> str:
    """The compact per-cell table (one line per cell, errors in the note column)."""
    lines = [_row([name for name, _, _ in TABLE_COLUMNS])]
    for c in cells:
        rate = "-" if c.ours_rate is None else f"{c.ours_rate:.0f} {c.rate_unit}"
        note = f"ERROR {c.error}" if c.error else c.note
        lines.append(
            _row(
                [
                    c.op,
                    c.shape,
                    str(c.m),
                    _fmt(c.ours_ms, ".4f"),
                    _fmt(c.ref_ms, ".4f"),
                    _fmt(c.ratio, ".2f"),
                    _fmt(c.rel_err, ".1e"),
                    _fmt_bits(c.rows_equal),
                    rate,
                    _fmt(c.ref_rate, ".0f"),
                    note,
                ]
            )  # fmt: skip
        )
    return "\n".join(lines)


def format_summary(summary: dict) -> str:
    """Human-readable lines of `summarize`'s result."""

    def ratio(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    lines = [
        f"linear geomean ratio (invariant / cuBLAS): {ratio(summary['linear_geomean_ratio'])}",
        "  by role: "
        + ", ".join(
            f"{op.removeprefix('linear ')} {ratio(v)}"
            for op, v in summary["linear_geomean_ratio_by_role"].items()
        ),
        f"attention prefill ratio (vs SDPA flash): {ratio(summary['attention_prefill_ratio'])}",
        f"attention decode ratio (vs SDPA flash): {ratio(summary['attention_decode_ratio'])}",
        f"row ops geomean ratio (vs torch): {ratio(summary['rows_geomean_ratio'])}",
    ]
    for key in ("worst_cell", "worst_linear_cell"):
        if summary[key] is not None:
            lines.append(
                f"{key.replace('_', ' ')}: {summary[key]['cell']} {ratio(summary[key]['ratio'])}"
            )
    failed = summary["failed_checks"]
    lines.append(f"checks failed: {len(failed)}" + (f" ({', '.join(failed)})" if failed else ""))
    lines.append(f"cells with errors: {len(summary['errors'])}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- machine
def _nvidia_smi(query: str) -> str:
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return "unavailable"
    return done.stdout.strip().splitlines()[0] if done.stdout.strip() else "unavailable"


# peak HBM bandwidth, GB/s, NVIDIA's figures (H200 SXM: 4.8 TB/s HBM3e; H100 SXM: 3.35 TB/s HBM3)
PEAK_HBM_GBPS = {"H200": 4800.0, "H100": 3350.0}


def hbm_gbps() -> float:
    """This GPU's peak HBM bandwidth (GB/s) by its name; an unknown GPU is an error."""
    import torch

    name = torch.cuda.get_device_name(0)
    for key, gbps in PEAK_HBM_GBPS.items():
        if key in name:
            return gbps
    raise SystemExit(f"no peak HBM figure for {name!r}: add it to gpu_ops.PEAK_HBM_GBPS")


def machine_info() -> dict:
    """GPU, driver and library versions (CUDA needed)."""
    import torch
    import triton

    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "sm_count": props.multi_processor_count,
        "memory_gib": round(props.total_memory / 2**30, 1),
        "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
        "driver": _nvidia_smi("driver_version"),
        "clocks_max_sm_mem_mhz": _nvidia_smi("clocks.max.sm,clocks.max.mem"),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "bf16_reduced_precision_reduction": (
            torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction
        ),
    }


# ---------------------------------------------------------------------------- helpers
GRAPH_CALLS = 20  # calls per captured graph in --graph mode


def bench(fn: Callable[[], object], warmup: int, rep: int) -> float:
    """Median ms of `fn` (cold L2 before every call; see module docstring)."""
    from triton.testing import do_bench

    if os.environ.get("SAMEBITS_BENCH_GRAPH"):
        return bench_graph(fn, rep)
    return float(do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def bench_graph(fn: Callable[[], object], rep: int) -> float:
    """ms per call of `fn` replayed from a CUDA graph, without host launch overhead: a graph of
    GRAPH_CALLS x (zero a 256 MB buffer, fn) minus a graph of the zeroing alone, median of
    replays (the L2 is cold before every call, as with do_bench)."""
    import torch

    scratch = torch.empty(64 * 1024 * 1024, dtype=torch.int32, device="cuda")
    fn()  # compile and allocate outside the capture
    with_fn, flush_only = _capture(scratch, fn), _capture(scratch, None)
    return max(_replay_ms(with_fn, rep) - _replay_ms(flush_only, rep), 0.0) / GRAPH_CALLS


def _capture(scratch, fn):
    import torch

    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for _ in range(GRAPH_CALLS):
            scratch.zero_()
            if fn is not None:
                fn()
    torch.cuda.synchronize()
    return graph


def _replay_ms(graph, rep: int) -> float:
    import torch

    times = []
    for _ in range(max(5, rep // 3)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def rel_error(ours, ref) -> float:
    """max |ours - ref| / max |ref| in float32."""
    ours, ref = ours.float(), ref.float()
    return float((ours - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def same_bits(a, b) -> bool:
    """Same shape, dtype and bit pattern (integer views)."""
    import torch

    ints = {4: torch.int32, 2: torch.int16, 1: torch.int8}
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    view = ints[a.element_size()]
    return bool(torch.equal(a.contiguous().view(view), b.contiguous().view(view)))


def randn(shape: Sequence[int], dtype, scale: float = 1.0, seed: int = 0):
    """Seeded random normal tensor on cuda (values are never exactly zero in practice)."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(seed)
    return (torch.randn(tuple(shape), generator=gen, device="cuda") * scale).to(dtype)


@dataclass
class Runner:
    """Runs cells with a soft deadline, printing each as it finishes."""

    warmup: int
    rep: int
    deadline: float
    cells: list[Cell] = field(default_factory=list)

    def run(self, cell: Cell, body: Callable[[Cell], None]) -> None:
        """`body(cell)` fills the cell; an exception becomes the cell's error."""
        if time.monotonic() > self.deadline:
            cell.error = "skipped: --max-seconds reached"
        else:
            try:
                body(cell)
            except Exception as exc:  # noqa: BLE001 - one broken kernel must not end the run
                last = traceback.format_exception_only(type(exc), exc)[-1].strip()
                cell.error = last[:300]
        self.cells.append(cell)
        print(format_table([cell]).splitlines()[1], flush=True)

    def time_pair(self, cell: Cell, ours: Callable[[], object], ref: Callable[[], object]) -> None:
        cell.ours_ms = bench(ours, self.warmup, self.rep)
        cell.ref_ms = bench(ref, self.warmup, self.rep)


# ---------------------------------------------------------------------------- linears
def linear_cells(runner: Runner, sweep: Sweep) -> None:
    for role, (n, k) in LINEAR_SHAPES.items():
        ms = [m for m in sweep.ms if role != "lm_head" or m <= sweep.lm_head_max_m]
        state: dict = {}  # the role's weight and kernel, made on its first cell
        for m in ms:
            cell = Cell(f"linear {role}", f"N={n} K={k}", m, rate_unit="TFLOP/s")
            runner.run(cell, partial(_linear_cell, runner, state=state, role=role, m=m))


def _linear_cell(runner: Runner, cell: Cell, state: dict, role: str, m: int) -> None:
    import torch
    import torch.nn.functional as F

    from samebits.kernels.triton.linear import TritonLinear, choose_launch

    n, k = LINEAR_SHAPES[role]
    if "lin" not in state:
        weight = randn((n, k), torch.bfloat16, k**-0.5, seed=1)
        out_dtype = torch.float32 if role == "lm_head" else torch.bfloat16
        state.update(weight=weight, lin=TritonLinear(weight, None, role, out_dtype))
    weight, lin = state["weight"], state["lin"]
    x = randn((m, k), torch.bfloat16, seed=2 + m)
    ours = lin(x)
    ref = F.linear(x, weight)
    cell.rel_err = rel_error(ours, ref)
    if m > 1:
        cell.rows_equal = same_bits(lin(x[:1])[0], ours[0]) and same_bits(
            lin(x[m - 1 :].contiguous())[0], ours[m - 1]
        )
    launch = choose_launch(lin.plan, m)
    cell.note = (
        f"S={lin.plan.splits} BK={lin.plan.block_k} {launch.kind} {launch.block_m}x{launch.block_n}"
    )
    runner.time_pair(cell, lambda: lin(x), lambda: F.linear(x, weight))
    flops = 2.0 * m * n * k
    cell.ours_rate = flops / cell.ours_ms / 1e9
    cell.ref_rate = flops / cell.ref_ms / 1e9


# ---------------------------------------------------------------------------- attention
@dataclass
class PagedKV:
    """K/V slot caches [slots, HKV, D] behind shuffled block tables [B, C / BLOCK_SIZE], and
    the same K/V gathered contiguous per sequence ([B, HKV, C, D], for SDPA)."""

    k_cache: object
    v_cache: object
    tables: object  # numpy int64 [B, blocks]
    k_ref: object
    v_ref: object


def make_paged_kv(batch: int, context: int, seed: int) -> PagedKV:
    import numpy as np
    import torch

    blocks = -(-context // BLOCK_SIZE)
    perm = np.random.default_rng(seed).permutation(batch * blocks).astype(np.int64)
    tables = perm.reshape(batch, blocks)
    slots_total = batch * blocks * BLOCK_SIZE
    k_cache = randn((slots_total, NUM_KV_HEADS, HEAD_DIM), torch.bfloat16, seed=seed)
    v_cache = randn((slots_total, NUM_KV_HEADS, HEAD_DIM), torch.bfloat16, seed=seed + 1)
    pos = np.arange(context)
    slots = tables[:, pos // BLOCK_SIZE] * BLOCK_SIZE + pos % BLOCK_SIZE  # [B, C]
    index = torch.from_numpy(slots.reshape(-1)).cuda()
    k_ref = k_cache[index].view(batch, context, NUM_KV_HEADS, HEAD_DIM).transpose(1, 2)
    v_ref = v_cache[index].view(batch, context, NUM_KV_HEADS, HEAD_DIM).transpose(1, 2)
    return PagedKV(k_cache, v_cache, tables, k_ref.contiguous(), v_ref.contiguous())


def _metadata(positions, starts, tables):
    import numpy as np

    from samebits.kernels.triton.attention import attention_metadata

    group = NUM_HEADS // NUM_KV_HEADS
    return attention_metadata(
        np.asarray(positions, dtype=np.int64), np.asarray(starts, dtype=np.int64),
        np.ascontiguousarray(tables, dtype=np.int64), BLOCK_SIZE, group, "cuda",
    )  # fmt: skip


def sdpa_reference(
    q, k, v, causal: bool, backend: str = "flash"
) -> tuple[Callable[[], object], str]:
    """A callable running SDPA on [B, H, L, D] q and [B, HKV, C, D] k/v (the caller activates
    `backend`, which names it in the label), with GQA native if this torch supports it there,
    else K/V expanded beforehand."""
    import torch.nn.functional as F

    scale = HEAD_DIM**-0.5
    try:
        F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale, enable_gqa=True)
        return (
            lambda: F.scaled_dot_product_attention(
                q, k, v, is_causal=causal, scale=scale, enable_gqa=True
            ),
            f"sdpa {backend}, native GQA",
        )
    except RuntimeError:
        group = NUM_HEADS // NUM_KV_HEADS
        k_full = k.repeat_interleave(group, 1).contiguous()
        v_full = v.repeat_interleave(group, 1).contiguous()
        return (
            lambda: F.scaled_dot_product_attention(
                q, k_full, v_full, is_causal=causal, scale=scale
            ),
            f"sdpa {backend}, K/V expanded to H heads (untimed)",
        )


def prefill_cells(runner: Runner, sweep: Sweep) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for length in sweep.prefill_lens:
            cell = Cell("attention prefill", f"H={NUM_HEADS}/{NUM_KV_HEADS} D={HEAD_DIM}", length)
            cell.rate_unit = "TFLOP/s"
            runner.run(cell, partial(_prefill_cell, runner, length=length))


def _prefill_cell(runner: Runner, cell: Cell, length: int) -> None:
    import torch

    from samebits.kernels.triton.attention import paged_attention

    scale = HEAD_DIM**-0.5
    kv = make_paged_kv(1, length, seed=10 + length)
    q = randn((length, NUM_HEADS, HEAD_DIM), torch.bfloat16, seed=3 + length)
    meta = _metadata(range(length), [0, length], kv.tables)
    ours = paged_attention(q, kv.k_cache, kv.v_cache, meta, scale)
    q_ref = q.transpose(0, 1).unsqueeze(0).contiguous()  # [1, H, L, D]
    ref_fn, cell.note = sdpa_reference(q_ref, kv.k_ref, kv.v_ref, causal=True)
    ref = ref_fn()[0].transpose(0, 1)
    cell.rel_err = rel_error(ours, ref)
    alone = [
        paged_attention(q[p : p + 1].contiguous(), kv.k_cache, kv.v_cache, _metadata([p], [0, 1], kv.tables), scale)[0]
        for p in (0, length - 1)
    ]  # fmt: skip
    cell.rows_equal = same_bits(alone[0], ours[0]) and same_bits(alone[1], ours[length - 1])
    runner.time_pair(cell, lambda: paged_attention(q, kv.k_cache, kv.v_cache, meta, scale), ref_fn)
    flops = 4.0 * NUM_HEADS * HEAD_DIM * length * (length + 1) / 2  # causal QK^T and PV
    cell.ours_rate = flops / cell.ours_ms / 1e9
    cell.ref_rate = flops / cell.ref_ms / 1e9


def decode_cells(runner: Runner, sweep: Sweep, copy_gbps: float) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        for context in sweep.decode_contexts:
            for batch in sweep.decode_batches:
                cell = Cell(
                    "attention decode", f"ctx={context} H={NUM_HEADS}/{NUM_KV_HEADS}", batch
                )
                cell.rate_unit = "GB/s"
                body = partial(_decode_cell, runner, batch=batch, context=context, copy=copy_gbps)
                runner.run(cell, body)


def _decode_cell(runner: Runner, cell: Cell, batch: int, context: int, copy: float) -> None:
    import torch

    from samebits.kernels.triton.attention import paged_attention

    scale = HEAD_DIM**-0.5
    kv = make_paged_kv(batch, context, seed=20 + batch + context)
    q = randn((batch, NUM_HEADS, HEAD_DIM), torch.bfloat16, seed=4 + batch)
    meta = _metadata([context - 1] * batch, range(batch + 1), kv.tables)
    ours = paged_attention(q, kv.k_cache, kv.v_cache, meta, scale)
    ref_fn, note = sdpa_reference(q.unsqueeze(2), kv.k_ref, kv.v_ref, causal=False)
    ref = ref_fn()[:, :, 0]
    cell.rel_err = rel_error(ours, ref)
    if batch > 1:
        alone = [
            paged_attention(q[b : b + 1].contiguous(), kv.k_cache, kv.v_cache, _metadata([context - 1], [0, 1], kv.tables[b : b + 1]), scale)[0]
            for b in (0, batch - 1)
        ]  # fmt: skip
        cell.rows_equal = same_bits(alone[0], ours[0]) and same_bits(alone[1], ours[batch - 1])
    runner.time_pair(cell, lambda: paged_attention(q, kv.k_cache, kv.v_cache, meta, scale), ref_fn)
    kv_bytes = 2.0 * batch * context * NUM_KV_HEADS * HEAD_DIM * 2  # K and V, bfloat16
    cell.ours_rate = kv_bytes / cell.ours_ms / 1e6
    cell.ref_rate = kv_bytes / cell.ref_ms / 1e6
    cell.note = f"{note}; ours at {cell.ours_rate / copy:.0%} of copy bandwidth"


def measure_copy_gbps(warmup: int, rep: int) -> float:
    """Device-to-device copy of 1 GiB: bytes read + written per second, in GB/s."""
    import torch

    src = torch.ones(2**30, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = bench(lambda: dst.copy_(src), warmup, rep)
    return 2 * src.numel() / ms / 1e6


# ---------------------------------------------------------------------------- row ops
def row_op_cells(runner: Runner, sweep: Sweep) -> None:
    for op in ("rms_norm", "add_rms_norm", "silu_mul"):
        width = 2 * INTERMEDIATE if op == "silu_mul" else HIDDEN
        for m in sweep.ms:
            cell = Cell(op, f"[M, {width}]", m, rate_unit="GB/s")
            runner.run(cell, partial(_row_op_cell, runner, op=op, m=m))


def _torch_norm(x, w, eps: float, out_dtype):
    import torch

    x = x.float()
    return (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w).to(out_dtype)


def _row_op_cell(runner: Runner, cell: Cell, op: str, m: int) -> None:
    import torch
    import torch.nn.functional as F

    from samebits.kernels.triton import rows

    bf16 = torch.bfloat16
    w = randn((HIDDEN,), torch.float32, 0.1, seed=5) + 1.0
    if op == "rms_norm":
        x = randn((m, HIDDEN), torch.float32, seed=6 + m)

        def ours(x=x):
            return rows.rms_norm(x, w, RMS_EPS, bf16)

        def ref(x=x):
            return _torch_norm(x, w, RMS_EPS, bf16)

        moved = m * HIDDEN * (4 + 2)
    elif op == "add_rms_norm":
        x = randn((m, HIDDEN), bf16, seed=6 + m)
        res0 = randn((m, HIDDEN), torch.float32, seed=7 + m)
        res_ours, res_ref = res0.clone(), res0.clone()

        def ours(x=x, res=res_ours):
            return rows.add_rms_norm(x, res, w, RMS_EPS, bf16)

        def ref(x=x, res=res_ref):
            return _torch_norm(res.add_(x), w, RMS_EPS, bf16)

        moved = m * HIDDEN * (2 + 4 + 4 + 2)
    else:
        x = randn((m, 2 * INTERMEDIATE), bf16, seed=6 + m)

        def ours(x=x):
            return rows.silu_mul(x)

        def ref(x=x):
            return F.silu(x[:, :INTERMEDIATE]) * x[:, INTERMEDIATE:]

        moved = m * INTERMEDIATE * (4 + 2)
    out = ours()
    cell.rel_err = rel_error(out, ref())
    if m > 1:
        cell.rows_equal = _rows_equal_alone(
            op, x, w, out, m, res0 if op == "add_rms_norm" else None
        )
    runner.time_pair(cell, ours, ref)
    cell.ours_rate = moved / cell.ours_ms / 1e6
    cell.ref_rate = moved / cell.ref_ms / 1e6


def _rows_equal_alone(op: str, x, w, out, m: int, res0) -> bool:
    """Rows 0 and m-1 of `out` (one call over all m rows) equal the same rows computed alone."""
    import torch

    from samebits.kernels.triton import rows

    ok = True
    for i in (0, m - 1):
        xi = x[i : i + 1].contiguous()
        if op == "rms_norm":
            alone = rows.rms_norm(xi, w, RMS_EPS, torch.bfloat16)
        elif op == "add_rms_norm":
            alone = rows.add_rms_norm(xi, res0[i : i + 1].clone(), w, RMS_EPS, torch.bfloat16)
        else:
            alone = rows.silu_mul(xi)
        ok = ok and same_bits(alone[0], out[i])
    return ok


# ---------------------------------------------------------------------------- main
def default_out_path() -> Path:
    out = os.environ.get("OUT")
    return Path(out) / "gpu_ops.json" if out else Path("gpu_ops.json")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="reduced sweep")
    parser.add_argument(
        "--only", choices=("linear", "attention", "rows"), action="append",
        help="run only these sections (repeatable; default all)",
    )  # fmt: skip
    parser.add_argument("--warmup", type=int, default=WARMUP_MS, help="do_bench warmup, ms")
    parser.add_argument("--rep", type=int, default=REP_MS, help="do_bench repetition time, ms")
    parser.add_argument(
        "--max-seconds", type=float, default=220.0,
        help="soft deadline: cells not started by then are recorded as skipped",
    )  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: see above)")
    return parser.parse_args(argv)


def write_json(path: Path, info: dict, args: argparse.Namespace, cells: Sequence[Cell]) -> None:
    data = {
        "machine": info,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "summary": summarize(cells),
        "cells": [c.to_json() for c in cells],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1))


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("gpu_ops.py needs a CUDA GPU (torch sees none); nothing was measured.")
        return 2
    sweep = QUICK if args.quick else FULL
    sections = set(args.only or ("linear", "attention", "rows"))
    out_path = args.out or default_out_path()
    info = machine_info()
    print(json.dumps(info, indent=1), flush=True)
    start = time.monotonic()
    runner = Runner(args.warmup, args.rep, start + args.max_seconds)
    info["copy_gbps"] = copy_gbps = measure_copy_gbps(args.warmup, args.rep)
    print(f"device-to-device copy: {copy_gbps:.0f} GB/s (read + write)\n", flush=True)
    print(format_table([]), flush=True)
    steps = [
        ("linear", lambda: linear_cells(runner, sweep)),
        ("attention", lambda: prefill_cells(runner, sweep)),
        ("attention", lambda: decode_cells(runner, sweep, copy_gbps)),
        ("rows", lambda: row_op_cells(runner, sweep)),
    ]
    for section, step in steps:
        if section in sections:
            step()
            write_json(out_path, info, args, runner.cells)
            torch.cuda.empty_cache()
    info["wall_s"] = round(time.monotonic() - start, 1)
    write_json(out_path, info, args, runner.cells)
    print("\n" + format_table(runner.cells))
    print("\n" + format_summary(summarize(runner.cells)))
    print(f"\nwall {info['wall_s']} s; JSON: {out_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
