"""Where a samebits decode step's time goes (issue 12): the native kernels (their C entry
points timed directly), the Python around them, the runner, and the engine's host work
(sampler, SHA-256 logits digests, the row-worker hand-off, scheduler, detokenizer, outputs).

Invariant: instrumentation wraps callables of this process's engine and native library only
(never in a timing run); it changes no value. Times are wall clock, summed over the threads
that ran the wrapped calls (the sampler may run on row-worker threads).
"""

from __future__ import annotations

from common import OpClock, record_schedule

C_KERNELS = ("sb_gemm", "sb_attention", "sb_rms_norm", "sb_add_rms_norm", "sb_silu_mul")
PY_OPS = ("rms_norm", "add_rms_norm", "head_rms_norm", "rope", "silu_mul", "attention")
LINEARS = ("qkv", "o", "gate_up", "down")


def instrument(llm, clock: OpClock) -> list:
    """Wrap the engine's step parts, the model's ops and linears, and the C kernels. Returns a
    one-item list that holds the latest scheduler output."""
    import samebits.engine.engine as engine_module
    import samebits.engine.output_processor as output_module
    from samebits.kernels.cpu import native

    lib = native.library()
    for name in C_KERNELS:
        setattr(lib, name, clock.wrap(f"C {name}", getattr(lib, name)))
    engine = llm.engine
    model = engine.runner.model
    model.fuse_layers = False  # op by op: the per-kernel breakdown (sblayer.c hides its calls)
    linears = [getattr(layer, name) for layer in model.layers for name in LINEARS]
    for linear in [*linears, model.lm_head]:
        if hasattr(linear, "_gemm"):  # SbLinear keeps the entry point it was built with
            linear._gemm = lib.sb_gemm
    for layer in model.layers:
        for name in LINEARS:
            setattr(layer, name, clock.wrap(f"py linear {name}", getattr(layer, name)))
    model.lm_head = clock.wrap("py linear lm_head", model.lm_head)
    for name in PY_OPS:
        setattr(model.ops, name, clock.wrap(f"py {name}", getattr(model.ops, name)))
    model.forward = clock.wrap("forward", model.forward)
    engine.runner.launch = clock.wrap("execute", engine.runner.launch)  # runs it on the CPU
    for module, name in ((engine_module, "sample"), (output_module, "logits_digest"),
                         (engine_module, "map_rows"), (output_module, "map_rows")):  # fmt: skip
        setattr(module, name, clock.wrap(f"host {name}", getattr(module, name)))
    engine._sample = clock.wrap("host row work", engine._sample)
    out = engine.output_processor  # detokenizer + output, per row
    out.emit = clock.wrap("host advance", out.emit)
    sched = engine.scheduler
    sched.schedule = clock.wrap("host schedule", sched.schedule)
    last = record_schedule(sched)
    sched.update_from_output = clock.wrap("host update", sched.update_from_output)
    engine.step = clock.wrap("step", engine.step)
    return last


def breakdown(ms: dict[str, float]) -> list[tuple[str, float]]:
    """Per-step rows (label, ms) from per-step label totals. lm_head's kernel time is taken as
    its wrapper's (one call per step); the layer linears get the rest of the C GEMM time."""
    g = lambda k: ms.get(k, 0.0)  # noqa: E731
    head = g("py linear lm_head")
    py_ops = head + sum(g(f"py linear {n}") for n in LINEARS) + sum(g(f"py {n}") for n in PY_OPS)
    c_all = sum(g(f"C {n}") for n in C_KERNELS)
    rope = g("py rope") + g("py head_rms_norm")
    row_work = g("host row work")
    sampler, digest = g("host sample"), g("host logits_digest")
    rows = [
        ("kernel: linears of the layers (sbgemm, Q4_1 expanded in-kernel)", g("C sb_gemm") - head),
        ("kernel: lm_head (sbgemm, Q8_0 expanded in-kernel)", head),
        ("kernel: attention over the float32 KV cache (sbattn)", g("C sb_attention")),
        ("kernel: RMSNorm + residual add (sbrow)", g("C sb_rms_norm") + g("C sb_add_rms_norm")),
        ("kernel: SiLU-mul (sbrow)", g("C sb_silu_mul")),
        ("kernel: RoPE (numba, with its wrapper)", rope),
        (
            "python: wrappers around the C kernels (allocation, checks, ctypes)",
            py_ops - c_all - rope,
        ),
        (
            "python: rest of forward (embedding, reshapes, KV index_copy, loop)",
            g("forward") - py_ops,
        ),
        ("runner: batch building, logits to numpy", g("execute") - g("forward")),
        ("host: sampler (float64 pass, argmax)", sampler),
        ("host: SHA-256 logits digests", digest),
        ("host: other row work (logprobs, bookkeeping)", row_work - sampler),
        ("host: row-worker hand-off (map_rows wall - row work)", g("host map_rows") - row_work),
        ("host: scheduler (schedule + update)", g("host schedule") + g("host update")),
        ("host: detokenizer + outputs", g("host advance")),
    ]
    seen = g("execute") + g("host map_rows") + g("host schedule") + g("host update")
    rows.append(("host: rest of step", g("step") - seen - g("host advance")))
    rows.append(("TOTAL per decode step", g("step")))
    return rows


def instrument_fused(llm, clock: OpClock) -> list:
    """Wrap the step, the forward, the fused layers (one `sblayer.c` call each, timed as one
    part) and the lm_head; the model must have run once (its fused layers are built)."""
    engine = llm.engine
    model = engine.runner.model
    fused = model._fused_layers(engine.runner.kv_cache)
    if fused is None:
        raise RuntimeError("this model runs op by op (sblayer.c does not cover it)")
    fused.run = clock.wrap("layers", fused.run)
    model.lm_head = clock.wrap("lm_head", model.lm_head)
    model.forward = clock.wrap("forward", model.forward)
    last = record_schedule(engine.scheduler)
    engine.step = clock.wrap("step", engine.step)
    return last


def fused_breakdown(ms: dict[str, float]) -> list[tuple[str, float]]:
    g = lambda k: ms.get(k, 0.0)  # noqa: E731
    return [
        ("kernels: all decoder layers (sblayer.c, one call per layer)", g("layers")),
        ("kernel: lm_head (sbgemm, Q8_0 expanded in-kernel)", g("lm_head")),
        ("python: rest of forward (embedding, first norm, final norm)",
         g("forward") - g("layers") - g("lm_head")),
        ("host: runner, sampler, digests, scheduler, outputs", g("step") - g("forward")),
        ("TOTAL per decode step", g("step")),
    ]  # fmt: skip


def profile_decode(
    llm, prompts: list[list[int]], max_tokens: int, fused: bool = False
) -> tuple[list, int]:
    """Run `prompts` to completion (greedy, ignore_eos) step by step, instrumented. Returns the
    mean per-step breakdown of the pure decode steps (every request one token) and their count:
    per kernel op by op, or (`fused`) the path `LLM.generate` takes, its layers as one part.
    """
    from samebits import SamplingParams
    from samebits.outputs import RequestOutputKind

    clock = OpClock()
    last = (instrument_fused if fused else instrument)(llm, clock)
    engine = llm.engine
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, ignore_eos=True)
    final = RequestOutputKind.FINAL_ONLY  # as LLM.generate, the benchmark's path
    for i, prompt in enumerate(prompts):
        engine.add_request(f"profile-{i}", prompt, params, output_kind=final)
    sums: dict[str, float] = {}
    steps = 0
    while engine.has_unfinished_requests():
        clock.reset()
        engine.step()
        scheduled = last[0].scheduled
        if len(scheduled) == len(prompts) and all(len(s.token_ids) == 1 for s in scheduled):
            steps += 1
            for k, v in clock.totals.items():
                sums[k] = sums.get(k, 0.0) + v
    ms = {k: v * 1e3 / max(steps, 1) for k, v in sums.items()}
    return (fused_breakdown if fused else breakdown)(ms), steps
