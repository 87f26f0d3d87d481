"""Streaming check (issue 10.6): time per streamed token stays flat over a long generation.

One request on the random-weight tiny Llama (`random_model("tiny-llama")`, CPU, float32,
invariant plan), greedy, `ignore_eos`, `--max-tokens` outputs (default 1000), `logprobs`
(top `--logprobs`, default 5) so every position carries a logprobs dict and a digest.

`--path server` (default): the real server (`build_app`, uvicorn on a loopback port, no audit
log) and a streaming `/v1/completions` call read with httpx; per-token time is the client's
arrival time of each chunk, divided over the tokens it carries. `--path engine`: the engine
alone, `LLMEngine.step()` in a loop (with `--output-kind delta|cumulative` where the engine
has output kinds).

For both it also reports, per step, the engine's host time outside the forward pass (step
time minus `runner.execute`: sampling, digests, logprobs, detokenization, building the
outputs) and the forward time itself, so growth in the output path is told apart from the
attention's (which grows with the context by design). Windows: tokens [10, 100), [100, 500),
[500, 1000) (scaled to `--max-tokens`). Prints one JSON line per window and a summary.

    PYTHONPATH=src python benchmarks/streaming.py [--path server|engine] [--max-tokens 1000]
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import threading
import time
from typing import Any


def build_engine(num_threads: int | None, max_tokens: int):
    from samebits.engine.engine import LLMEngine
    from samebits.model.random_init import random_model

    loaded = random_model("tiny-llama", seed=0)
    return LLMEngine.from_loaded(
        loaded, num_threads=num_threads, max_model_len=max_tokens + 64, max_num_seqs=4,
        num_kv_blocks=(max_tokens + 64) // 16 + 8,
    )  # fmt: skip


class OutputPathTimer:
    """Times the per-request output path, call by call (one call per streamed token here):
    the engine building the request's output (`OutputProcessor._output`), the engine thread turning
    it into a `Delta` for the event loop (`EngineLoop._emit`), and the event loop folding it
    into the call's `Choice` (`Choice.apply`). Present before and after output kinds, so the
    same script measures both."""

    def __init__(self, engine: Any) -> None:
        self.calls: dict[str, list[float]] = {"output": [], "emit": [], "apply": []}
        out = engine.output_processor
        out._output = self._timed(out._output, "output")
        try:
            from samebits.server.engine_loop import EngineLoop
            from samebits.server.generation import Choice
        except ImportError:  # no server extras: the engine path only
            return
        EngineLoop._emit = self._timed(EngineLoop._emit, "emit")
        Choice.apply = self._timed(Choice.apply, "apply")

    def _timed(self, func, key: str):
        calls = self.calls[key]

        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return func(*args, **kwargs)
            finally:
                calls.append(time.perf_counter() - t0)

        return timed

    def per_token(self) -> list[float]:
        """Output-path seconds of token i (i from 0): the sum over the parts that ran."""
        parts = [c for c in self.calls.values() if c]
        return [sum(col) for col in zip(*parts, strict=False)]


class StepTimer:
    """Wraps `engine.step` and `engine.runner.execute`: per-step wall and forward times."""

    def __init__(self, engine: Any) -> None:
        self.steps: list[tuple[float, float]] = []  # (step wall, forward) seconds
        self._forward = 0.0
        execute, step = engine.runner.execute, engine.step

        def timed_execute(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return execute(*args, **kwargs)
            finally:
                self._forward += time.perf_counter() - t0

        def timed_step(*args, **kwargs):
            self._forward = 0.0
            t0 = time.perf_counter()
            out = step(*args, **kwargs)
            self.steps.append((time.perf_counter() - t0, self._forward))
            return out

        engine.runner.execute = timed_execute
        engine.step = timed_step


def run_server(engine: Any, args: argparse.Namespace) -> list[tuple[float, int]]:
    """(arrival time, tokens in the chunk) of every streamed chunk with tokens."""
    import httpx
    import uvicorn

    from samebits.server.app import build_app
    from samebits.server.config import ServerConfig

    app = build_app(engine, ServerConfig(model_names=("tiny",)))
    config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    host, port = server.servers[0].sockets[0].getsockname()[:2]
    body = {
        "model": "tiny",
        "prompt": "Once upon a time",
        "max_tokens": args.max_tokens,
        "temperature": 0,
        "ignore_eos": True,
        "logprobs": args.logprobs,
        "stream": True,
    }
    arrivals: list[tuple[float, int]] = []
    try:
        url = f"http://{host}:{port}/v1/completions"
        with httpx.stream("POST", url, json=body, timeout=600) as response:
            response.raise_for_status()
            for line in response.iter_lines():
                if not line.startswith("data: {"):
                    continue
                chunk = json.loads(line[len("data: ") :])
                choices = chunk.get("choices") or []
                n = sum(len(c["samebits"]["token_ids"]) for c in choices)
                if n:
                    arrivals.append((time.perf_counter(), n))
    finally:
        server.should_exit = True
        thread.join(30)
    return arrivals


def run_engine(engine: Any, args: argparse.Namespace) -> list[tuple[float, int]]:
    from samebits.sampling import SamplingParams

    params = SamplingParams(
        max_tokens=args.max_tokens, temperature=0.0, ignore_eos=True, logprobs=args.logprobs,
        seed=0,
    )  # fmt: skip
    ids = engine.tokenizer.encode("Once upon a time", add_special_tokens=True)
    kwargs = {}
    if args.output_kind == "delta":  # cumulative is the default (also before output kinds)
        from samebits.outputs import RequestOutputKind

        kwargs["output_kind"] = RequestOutputKind[args.output_kind.upper()]
    engine.add_request("bench", ids, params, **kwargs)
    arrivals: list[tuple[float, int]] = []
    seen = 0
    while engine.has_unfinished_requests():
        for out in engine.step():
            c = out.outputs[0]
            if args.output_kind == "delta":
                n = len(c.token_ids)
            else:  # cumulative: what a streaming consumer slices off
                n = len(c.token_ids) - seen
                _ = (c.token_ids[seen:], c.logits_digests[seen:], c.logprobs[seen:])
            seen += n
            if n:
                arrivals.append((time.perf_counter(), n))
    return arrivals


def per_token_times(arrivals: list[tuple[float, int]]) -> list[float]:
    """Time attributed to each token: the gap to the previous chunk over its tokens."""
    out: list[float] = []
    for (t0, _), (t1, n) in zip(arrivals, arrivals[1:], strict=False):
        out.extend([(t1 - t0) / n] * n)
    return out  # entry i: token i + 1 (the first token includes the prefill: not counted)


def windows(max_tokens: int) -> list[tuple[int, int]]:
    scale = max_tokens / 1000
    edges = [round(e * scale) for e in (10, 100, 500, 1000)]
    return list(zip(edges, edges[1:], strict=False))


def summarize(values: list[float], lo: int, hi: int) -> dict[str, float]:
    part = values[lo - 1 : hi - 1]
    return {
        "mean_ms": round(1e3 * statistics.fmean(part), 4),
        "median_ms": round(1e3 * statistics.median(part), 4),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--path", choices=("server", "engine"), default="server")
    parser.add_argument("--output-kind", choices=("delta", "cumulative"), default=None,
                        help="engine path: the output kind asked of the engine")  # fmt: skip
    parser.add_argument("--max-tokens", type=int, default=1000)
    parser.add_argument("--logprobs", type=int, default=5)
    parser.add_argument("--num-threads", type=int, default=None)
    args = parser.parse_args()
    if args.path == "engine" and args.output_kind is None:
        args.output_kind = "cumulative"
    engine = build_engine(args.num_threads, args.max_tokens)
    timer = StepTimer(engine)
    output_path = OutputPathTimer(engine)
    run = run_server if args.path == "server" else run_engine
    arrivals = run(engine, args)
    tokens = sum(n for _, n in arrivals)
    assert tokens == args.max_tokens, (tokens, args.max_tokens)
    per_token = per_token_times(arrivals)
    # step i (0-based, after the prefill step) produced token i + 1
    host = [wall - fwd for wall, fwd in timer.steps[1:]]
    forward = [fwd for _, fwd in timer.steps[1:]]
    # the client's time per token less the forward pass of the step that made it
    outside = [t - f for t, f in zip(per_token, forward, strict=False)]
    out_path = output_path.per_token()[1:]  # token 0 (with the prefill) not counted
    print(
        json.dumps(
            {
                "path": args.path,
                "output_kind": args.output_kind,
                "max_tokens": args.max_tokens,
                "logprobs": args.logprobs,
                "python": platform.python_version(),
                "machine": platform.machine(),
                "steps": len(timer.steps),
            }
        )
    )
    rows = []
    for lo, hi in windows(args.max_tokens):
        row = {
            "tokens": f"[{lo},{hi})",
            "per_token": summarize(per_token, lo, hi),
            "per_token_minus_forward": summarize(outside, lo, hi),
            "output_path": summarize(out_path, lo, hi),
            "engine_host": summarize(host, lo, hi),
            "forward": summarize(forward, lo, hi),
        }
        for part, calls in output_path.calls.items():
            if calls:
                row[f"output_path.{part}"] = summarize(calls[1:], lo, hi)
        rows.append(row)
        print(json.dumps(row))
    first, last = rows[0], rows[-1]
    growth = {
        key: round(last[key]["median_ms"] / first[key]["median_ms"], 2)
        for key in first
        if key != "tokens"
    }
    print(json.dumps({"last_window_over_first (median)": growth}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
