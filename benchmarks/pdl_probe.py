"""Probe: does programmatic dependent launch (PDL) shorten a decode step's chain of linears?

A batch-64 decode step runs ~130 weight-streaming linears back to back; each kernel's start
(launch, first loads in flight) and tail (the last programs running while other SMs idle) is
time the weights do not stream. With PDL a kernel may launch while its predecessor's last
programs run: it can start loading its own weights (which no earlier kernel writes) and waits
(`gdc_wait`) before reading anything the predecessor wrote.

Not the shipped kernels: a plain pointer-load linear (64 x 64 tiles over M = 64 rows,
Llama-3-8B shapes qkv, o, gate_up, down, x 32 layers) in one CUDA graph, run three ways,
outputs compared bit for bit first (PDL never changes the arithmetic):
  plain     stream order (what the engine does today);
  pdl       launched with PDL; each program calls `gdc_launch_dependents` at its start and
            `gdc_wait` before its first load;
  prefetch  as pdl, and the program's first key tile of weights is loaded before `gdc_wait`
            (its first dot uses it).

    python3 benchmarks/pdl_probe.py     # GPU only; JSON to $OUT/pdl_probe.json
Evidence class: measurement (a probe for a design decision, not a shipped path).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_ops import machine_info  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gate_up": (28672, 4096), "down": (4096, 14336)}
LAYERS, M, BLOCK_N, BLOCK_K = 32, 64, 64, 64


@triton.jit
def probe_linear_kernel(x_ptr, w_ptr, y_ptr, N, K: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, PDL: tl.constexpr,
                        PREFETCH: tl.constexpr):  # fmt: skip
    rn = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    rm = tl.arange(0, BLOCK_M)
    rk = tl.arange(0, BLOCK_K)
    w_ptrs = w_ptr + rn.to(tl.int64)[:, None] * K + rk[None, :]
    x_ptrs = x_ptr + rm[:, None] * K + rk[None, :]
    if PDL:
        gdc_launch_dependents()
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if PREFETCH:
        w0 = tl.load(w_ptrs)
        gdc_wait()
        acc = tl.dot(tl.load(x_ptrs), tl.trans(w0), acc)
        for k in range(1, K // BLOCK_K):
            acc = tl.dot(
                tl.load(x_ptrs + k * BLOCK_K), tl.trans(tl.load(w_ptrs + k * BLOCK_K)), acc
            )
    else:
        if PDL:
            gdc_wait()
        for k in range(0, K // BLOCK_K):
            acc = tl.dot(
                tl.load(x_ptrs + k * BLOCK_K), tl.trans(tl.load(w_ptrs + k * BLOCK_K)), acc
            )
    tl.store(y_ptr + rm[:, None] * N + rn[None, :], acc.to(y_ptr.dtype.element_ty))


def build(seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    layers = []
    for _ in range(LAYERS):
        layer = {}
        for role, (n, k) in SHAPES.items():
            w = (torch.randn((n, k), device="cuda", generator=g) * 0.02).to(torch.bfloat16)
            x = torch.randn((M, k), device="cuda", generator=g).to(torch.bfloat16)
            layer[role] = (x, w, torch.empty((M, n), device="cuda", dtype=torch.bfloat16))
        layers.append(layer)
    return layers


def run(layers, mode: str) -> None:
    pdl, prefetch = mode != "plain", mode == "prefetch"
    for layer in layers:
        for x, w, y in layer.values():
            n, k = w.shape
            probe_linear_kernel[(n // BLOCK_N,)](
                x, w, y, n, K=k, BLOCK_M=M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, PDL=pdl,
                PREFETCH=prefetch, num_warps=4, num_stages=4, launch_pdl=pdl,
            )  # fmt: skip


def graph_ms(layers, mode: str, reps: int = 20) -> float:
    """Median ms of one replay of a CUDA graph of `run(layers, mode)` (warm L2 between)."""
    from gpu_ops import _replay_ms

    run(layers, mode)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        run(layers, mode)
    torch.cuda.synchronize()
    return _replay_ms(graph, 3 * reps)


def outputs(layers) -> list[torch.Tensor]:
    return [y.clone() for layer in layers for _, _, y in layer.values()]


def main() -> None:
    layers = build()
    result: dict = {"machine": machine_info(), "layers": LAYERS, "m": M, "modes": {}}
    run(layers, "plain")
    ref = outputs(layers)
    weight_gb = sum(n * k * 2 for n, k in SHAPES.values()) * LAYERS / 1e9
    for mode in ("plain", "pdl", "prefetch", "plain", "pdl", "prefetch"):
        run(layers, mode)
        same = all(torch.equal(a.view(torch.int16), b.view(torch.int16))
                   for a, b in zip(outputs(layers), ref, strict=True))  # fmt: skip
        ms = graph_ms(layers, mode) if same else None
        result["modes"].setdefault(mode, []).append(
            {"bits_equal": same, "ms": ms, "tb_s": weight_gb / ms if ms else None}
        )
        print(mode, same, ms, flush=True)
    out = Path(os.environ.get("OUT", "."), "pdl_probe.json")
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
