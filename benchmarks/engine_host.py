"""The engine's host time per decode step, without a model (issue 13: with steps scheduled
ahead, a GPU decode step takes max(device time, host time), and the device needs 6.3 ms at
batch 64 on the H200).

A stub runner stands in for `ModelRunner` on a GPU: its steps are ready at once, with the
greedy token of each row (a fixed function of the request and position), the device digests
as strings, and `tokens()` for a step scheduled ahead. Everything else is the real engine:
scheduler (incl. `schedule_ahead`), KV-cache manager, stop checks, detokenizer (the embedded
model's tokenizer), outputs. Run: `python benchmarks/engine_host.py [--batch 64] [--profile]`.
Prints one JSON object: ms per decode step (median over the steps after every request has
its prompt computed) for FINAL_ONLY requests (`LLM.generate`) and for DELTA (the server).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from samebits.engine.step_result import StepLogits  # noqa: E402

DIGEST = "0" * 64


class StubStep:
    """A launched step whose argmax and digests are known at once (rows are never asked)."""

    def __init__(self, sched_out, vocab: int) -> None:
        rows = [s for s in sched_out.scheduled if s.sample]
        self._row_of = {s.request_id: i for i, s in enumerate(rows)}
        self._top = np.array(
            [(hash(s.request_id) + 7919 * s.start_position) % (vocab - 10) + 5 for s in rows],
            dtype=np.int64,
        )

    def greedy(self) -> dict[str, tuple[int, float]]:
        return {rid: (int(self._top[i]), 1.0) for rid, i in self._row_of.items()}

    def digests(self) -> dict[str, str]:
        return dict.fromkeys(self._row_of, DIGEST)

    def tokens(self):
        return self._top, self._row_of

    def rows(self) -> StepLogits:
        raise AssertionError("the stub step has no rows (a request asked for them)")


class StubRunner:
    """`ModelRunner`'s launch interface with no model: what a GPU runner hands the engine."""

    feeds_tokens = True
    hashes_on_device = True

    def __init__(self, vocab: int) -> None:
        self.vocab = vocab

    def launch(self, sched_out, feed=None, copy_rows=True, device_digests=False) -> StubStep:
        return StubStep(sched_out, self.vocab)

    def stats(self) -> dict[str, int]:
        return {}


def step_ms(engine, batch: int, kind, prompt_len: int, new: int) -> list[float]:
    """ms of each engine step once all `batch` requests decode."""
    from samebits import SamplingParams

    params = SamplingParams(max_tokens=new, temperature=0.0, ignore_eos=True)
    rng = np.random.default_rng(0)
    for i in range(batch):
        prompt = rng.integers(5, engine.vocab_size - 5, prompt_len).tolist()
        engine.add_request(f"r{i}", prompt, params, output_kind=kind)
    times = []
    while engine.has_unfinished_requests():
        start = time.perf_counter()
        engine.step()
        times.append((time.perf_counter() - start) * 1e3)
    return times[2:-2]


def build(batch: int):
    from samebits.deployment import build_deployment
    from samebits.engine.engine import LLMEngine
    from samebits.model import load_model

    dep = build_deployment(load_model(None), "invariant")
    engine = LLMEngine.from_deployment(
        dep,
        num_kv_blocks=4096,
        max_num_seqs=batch,
        max_num_batched_tokens=8192,
        async_scheduling=True,
    )
    engine.runner = StubRunner(engine.vocab_size)
    return engine


def main() -> int:
    from samebits.outputs import RequestOutputKind

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--new", type=int, default=128)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    out: dict = {"batch": args.batch}
    for kind in (RequestOutputKind.FINAL_ONLY, RequestOutputKind.DELTA):
        engine = build(args.batch)
        prof = cProfile.Profile() if args.profile else None
        if prof:
            prof.enable()
        times = step_ms(engine, args.batch, kind, 128, args.new)
        if prof:
            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
            print(buf.getvalue(), file=sys.stderr)
        out[kind.name] = {
            "median_ms": float(np.median(times)),
            "steps": len(times),
            "ahead": engine.num_steps_ahead,
        }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
