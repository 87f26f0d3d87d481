"""Long contexts on the GPU (issue 25): the span-merged attention against SDPA flash, and what
a user gets from the engine at long contexts. One command, one process, H200, random
Llama-3-8B-shaped weights in bfloat16:

    python benchmarks/long_context.py --out $OUT/long_context.json            # everything
    python benchmarks/long_context.py --parts kernels --spans 256 512 1024    # a span sweep

Parts:
- `kernels`: the decode attention kernel alone (32 / 8 heads, D 128, pages of 16 in a random
  order) at batch 1 and 16, contexts 4k-32k (and 128k at batch 1): the launch the plan
  chooses (split-KV), spans in sequence (the launch of large batches: the work pattern of
  the kernel before spans), SDPA flash on contiguous K/V; GB/s = K and V bytes read / time,
  CUDA-graph replays with a cold L2 (`gpu_ops.bench_graph`). Each timed launch is first
  compared bit for bit (int16 views) with spans in sequence.
- `prefill`: one prompt of 8k and 32k tokens through the paged kernel vs causal SDPA under
  its flash backend (the issue's baseline), its cuDNN backend and its own choice (until
  2026-12-07 this part timed SDPA's own choice and called it SDPA flash).
- `engine`: `LLM` on the invariant and fast plans, defaults except `max_model_len`: batch-1
  decode tok/s at contexts 128 .. 128k (prefix cache on: the prompt is computed once, then
  tok/s = N / (time of 1 + N tokens - time of 1 token), both on the cached prompt), and a
  batch of 16 x 16k contexts: its decode step against the (weights + KV) bandwidth roofline.
Evidence class: measurement.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import time
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gpu_ops import (  # noqa: E402
    HEAD_DIM,
    NUM_HEADS,
    NUM_KV_HEADS,
    bench_graph,
    hbm_gbps,
    machine_info,
    make_paged_kv,
    randn,
    same_bits,
    sdpa_reference,
)

DECODE_CELLS = [(1, 4096), (1, 8192), (1, 16384), (1, 32768), (1, 131072),
                (16, 4096), (16, 8192), (16, 16384), (16, 32768)]  # fmt: skip
PREFILL_LENGTHS = (8192, 32768)
ENGINE_CONTEXTS = (128, 4096, 8192, 32768, 130000)
# the fast plan's largest context here: its SDPA ran out of memory from 8k (H200 2026-12-01,
# H100 2026-12-08: 8 GiB asked at 8k): `kernels/cpu/sdpa.py` called SDPA on 3-D tensors, which
# PyTorch's fused kernels refuse, so its math fallback materialized heads x n x L scores; it
# calls them as 4-D since 2026-12-08 (not yet measured on a GPU; an out-of-memory cell is
# recorded as an error row)
FAST_MAX_CONTEXT = 32768
DECODE_TOKENS = 128
BATCH16 = (16, 16384, 32)  # requests, context, decode tokens


def emit(results: list, **row) -> None:
    results.append(row)
    print(json.dumps(row), flush=True)


def _decode_meta(kv, batch: int, context: int, span: int):
    import numpy as np

    from samebits.kernels.triton.attention import attention_metadata

    positions = np.full(batch, context - 1)
    return attention_metadata(positions, np.arange(batch + 1), kv.tables, 16,
                              NUM_HEADS // NUM_KV_HEADS, "cuda", span=span)  # fmt: skip


def decode_cell(results: list, batch: int, context: int, span: int) -> None:
    """One (batch, context): chosen launch, spans in sequence, SDPA; bits, ms, GB/s."""
    from samebits.kernels.triton.attention import decode_splits, paged_attention

    kv = make_paged_kv(batch, context, seed=context + batch)
    q = randn((batch, NUM_HEADS, HEAD_DIM), kv.k_cache.dtype, seed=7)
    meta = _decode_meta(kv, batch, context, span)
    seq = dataclasses.replace(meta, one_token_each=False)
    scale = HEAD_DIM**-0.5
    chosen = paged_attention(q, kv.k_cache, kv.v_cache, meta, scale)
    ref = paged_attention(q, kv.k_cache, kv.v_cache, seq, scale)
    sdpa, how = sdpa_reference(q.unsqueeze(2), kv.k_ref, kv.v_ref, causal=False)
    gb = 2 * batch * context * NUM_KV_HEADS * HEAD_DIM * 2 / 1e9
    times = {
        "chosen": bench_graph(lambda: paged_attention(q, kv.k_cache, kv.v_cache, meta, scale), 50),
        "sequential": bench_graph(lambda: paged_attention(q, kv.k_cache, kv.v_cache, seq, scale), 50),
        "sdpa": bench_graph(sdpa, 50),
    }  # fmt: skip
    emit(results, part="decode_kernel", batch=batch, context=context, span=span,
         splits=decode_splits(meta, NUM_KV_HEADS), bits_equal=same_bits(chosen, ref),
         ms={k: round(v, 4) for k, v in times.items()},
         gbps={k: round(gb / (v / 1e3), 1) for k, v in times.items()},
         pct_hbm={k: round(100 * gb / (v / 1e3) / hbm_gbps(), 1) for k, v in times.items()},
         sdpa=how)  # fmt: skip


SDPA_BACKENDS = ("flash", "cudnn", "default")  # the baseline first


def sdpa_prefill_ms(qs, kv) -> dict:
    """Causal SDPA on [1, H, L, D] q, timed under each backend: FLASH_ATTENTION (the issue's
    "SDPA flash"), CUDNN_ATTENTION, and SDPA's own choice (no backend named). A backend that
    refuses the shape is recorded as an error string."""
    import contextlib

    import triton
    from torch.nn.attention import SDPBackend, sdpa_kernel

    named = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}
    out: dict = {}
    for name in SDPA_BACKENDS:
        ctx = sdpa_kernel(named[name]) if name in named else contextlib.nullcontext()
        try:
            with ctx:
                fn, out[f"{name}_how"] = sdpa_reference(qs, kv.k_ref, kv.v_ref, True, name)
                out[name] = round(triton.testing.do_bench(fn), 3)
        except RuntimeError as exc:
            out[name] = f"error: {str(exc)[:160]}"
    return out


def prefill_cell(results: list, length: int, span: int, tile: tuple[int, int] | None) -> None:
    """One prompt of `length` tokens: the paged kernel (the default tile, or `tile` = (block_m,
    warps)) vs causal SDPA under each backend (`sdpa_prefill_ms`); `ratio` is against SDPA
    flash."""
    import numpy as np
    import triton

    from samebits.kernels.triton.attention import attention_metadata, paged_attention

    kv = make_paged_kv(1, length, seed=length)
    q = randn((length, NUM_HEADS, HEAD_DIM), kv.k_cache.dtype, seed=3)
    block_m, warps = tile or (None, None)
    meta = attention_metadata(np.arange(length), np.array([0, length]), kv.tables, 16,
                              NUM_HEADS // NUM_KV_HEADS, "cuda", block_m, warps, span=span)  # fmt: skip
    scale = HEAD_DIM**-0.5
    ours = triton.testing.do_bench(lambda: paged_attention(q, kv.k_cache, kv.v_cache, meta, scale))
    sdpa = sdpa_prefill_ms(q.transpose(0, 1).unsqueeze(0).contiguous(), kv)
    ratios = {k: round(ours / sdpa[k], 3) for k in SDPA_BACKENDS if isinstance(sdpa[k], float)}
    emit(results, part="prefill_kernel", length=length, span=span,
         tile=[meta.block_m, meta.num_warps],
         ms_ours=round(ours, 3), ms_sdpa=sdpa, ratio=ratios.get("flash"),
         ratio_by_backend=ratios)  # fmt: skip


def kernel_parts(results: list, parts: set, spans: list[int], split_programs: list[int],
                 tiles: list) -> None:  # fmt: skip
    from samebits.kernels.triton import attention

    for programs in split_programs:
        attention.DECODE_SPLIT_PROGRAMS = programs
        for span in spans:
            if "kernels" in parts:
                for batch, context in DECODE_CELLS:
                    decode_cell(results, batch, context, span)
    attention.DECODE_SPLIT_PROGRAMS = split_programs[0]
    if "prefill" in parts:
        for span in spans:
            for length in PREFILL_LENGTHS:
                for tile in tiles:
                    prefill_cell(results, length, span, tile)


def _generate_s(llm, prompts: list[list[int]], tokens: int) -> float:
    from samebits import SamplingParams

    params = SamplingParams(max_tokens=tokens, temperature=0.0, ignore_eos=True, seed=0)
    start = time.perf_counter()
    outs = llm.generate(prompts, params)
    wall = time.perf_counter() - start
    assert all(len(o.outputs[0].token_ids) == tokens for o in outs)
    return wall


def decode_rate(llm, prompts: list[list[int]], tokens: int) -> dict:
    """(seconds of the uncached first call, decode seconds per step) on cached prompts."""
    first = _generate_s(llm, prompts, 1)
    short = min(_generate_s(llm, prompts, 1) for _ in range(2))
    long = _generate_s(llm, prompts, 1 + tokens)
    step = (long - short) / tokens
    return {"first_call_s": round(first, 3), "step_ms": round(step * 1e3, 3),
            "tok_s": round(len(prompts) / step, 1)}  # fmt: skip


def _measured(fn) -> dict:
    """fn()'s row, or the out-of-memory error as the row (the next cells still run)."""
    import torch

    try:
        return fn()
    except torch.OutOfMemoryError as e:
        torch.cuda.empty_cache()
        return {"error": f"out of memory: {str(e).splitlines()[0]}"}


def engine_part(results: list, loaded, weight_gb: float) -> None:
    from samebits import LLM
    from samebits.deployment import build_deployment
    from samebits.engine.engine import LLMEngine
    from samebits.engine.heap import collect_all

    vocab = loaded.config.vocab_size
    rng = random.Random(0)
    for plan in ("invariant", "fast"):
        dep = build_deployment(loaded, plan, device="cuda", max_model_len=131072)
        llm = LLM(engine=LLMEngine.from_deployment(dep))
        for context in ENGINE_CONTEXTS:
            if plan == "fast" and context > FAST_MAX_CONTEXT:
                continue
            prompt = [rng.randrange(vocab - 3) for _ in range(context)]
            emit(results, part="engine_batch1", plan=plan, context=context,
                 **_measured(partial(decode_rate, llm, [prompt], DECODE_TOKENS)))  # fmt: skip
        if plan == "invariant":
            batch16(results, llm, rng, vocab, weight_gb)
        del llm, dep
        collect_all()


def batch16(results: list, llm, rng, vocab: int, weight_gb: float) -> None:
    n, context, tokens = BATCH16
    prompts = [[rng.randrange(vocab - 3) for _ in range(context)] for _ in range(n)]
    rate = decode_rate(llm, prompts, tokens)
    kv_gb = n * (context + tokens / 2) * 32 * NUM_KV_HEADS * HEAD_DIM * 2 * 2 / 1e9
    roof_ms = (weight_gb + kv_gb) / hbm_gbps() * 1e3
    emit(results, part="engine_batch16", requests=n, context=context, **rate,
         weights_gb=round(weight_gb, 2), kv_gb=round(kv_gb, 2), roofline_ms=round(roof_ms, 3),
         x_roofline=round(rate["step_ms"] / roof_ms, 3))  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", nargs="+", default=["kernels", "prefill", "engine"])
    p.add_argument("--spans", nargs="+", type=int, default=None)
    p.add_argument("--split-programs", nargs="+", type=int, default=None)
    p.add_argument("--stages", nargs="+", type=int, default=None, help="num_stages sweep")
    p.add_argument("--prefill-tiles", nargs="+", default=None, help="block_m x warps, e.g. 128x8")
    p.add_argument("--out", default="long_context.json")
    args = p.parse_args()
    results: list = []
    try:  # what was measured is written even when a later cell fails
        measure(args, results)
    finally:
        doc = {"machine": machine_info(), "date": time.strftime("%Y-%m-%d"), "results": results}
        Path(args.out).write_text(json.dumps(doc, indent=1))
    return 0


def measure(args, results: list) -> None:
    import torch

    from samebits.kernels.plan import ATTENTION_SPAN
    from samebits.kernels.triton import attention

    spans = args.spans or [ATTENTION_SPAN]
    tiles = [tuple(map(int, t.split("x"))) for t in args.prefill_tiles or []] or [None]
    for stages in args.stages or [None]:
        attention.ATTENTION_STAGES = stages
        if stages is not None:
            emit(results, part="stages", num_stages=stages)
        kernel_parts(results, set(args.parts), spans,
                     args.split_programs or [attention.DECODE_SPLIT_PROGRAMS], tiles)  # fmt: skip
    attention.ATTENTION_STAGES = None
    if "engine" in args.parts:
        from samebits.model.random_init import random_model

        loaded = random_model("llama-3-8b", seed=0, device="cuda", dtype=torch.bfloat16)
        weight_gb = sum(t.numel() * t.element_size() for n, t in loaded.weights.items()
                        if "embed_tokens" not in n) / 1e9  # fmt: skip
        engine_part(results, loaded, weight_gb)


if __name__ == "__main__":
    raise SystemExit(main())
