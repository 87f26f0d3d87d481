"""CPU replay speed: decode tokens/s of the replay plan (the GPU invariant plan's bits on
this CPU, `kernels/replay`) beside the CPU invariant plan, same model, same process.

One greedy request of `--prompt-tokens` random ids and `--max-tokens` new tokens (ignore_eos)
per plan, batch 1, after one short warm-up request; build time and decode tokens/s (the
tokens after the first, over the time after the first) per plan. Model: `--model` (a HF
folder, GGUF, or random:<preset>; default the embedded SmolLM2).

    python benchmarks/replay_speed.py --max-tokens 32 --out replay_speed.json
Evidence class: measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from samebits import SamplingParams  # noqa: E402
from samebits.llm import LLM  # noqa: E402
from samebits.outputs import RequestOutputKind  # noqa: E402


def timed_request(llm: LLM, prompt: list[int], max_tokens: int) -> dict:
    """Wall time to the first token and of the whole request (streamed token times)."""
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    start = time.perf_counter()
    stamps = []
    for out in llm.generate_stream([prompt], params, RequestOutputKind.DELTA):
        stamps.extend([time.perf_counter() - start] * len(out.outputs[0].token_ids))
    decode_s = stamps[-1] - stamps[0]
    return {"first_token_s": round(stamps[0], 3), "total_s": round(stamps[-1], 3),
            "decode_tok_s": round((len(stamps) - 1) / decode_s, 3) if decode_s else None}  # fmt: skip


def run_plan(model: str | None, plan: str, prompt: list[int], max_tokens: int) -> dict:
    start = time.perf_counter()
    llm = LLM(model, device="cpu", kernel_plan=plan)
    built = time.perf_counter() - start
    timed_request(llm, prompt[:4], 2)  # warm-up
    return {"build_s": round(built, 2), **timed_request(llm, prompt, max_tokens)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None)
    p.add_argument("--prompt-tokens", type=int, default=16)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--plans", default="invariant,replay")
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "replay_speed.json"))
    a = p.parse_args()
    prompt = [random.Random(0).randrange(100, 1000) for _ in range(a.prompt_tokens)]
    result = {"model": a.model or "default (SmolLM2-135M)", "cpus": os.cpu_count(),
              "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens, "plans": {}}  # fmt: skip
    for plan in a.plans.split(","):
        result["plans"][plan] = run_plan(a.model, plan, prompt, a.max_tokens)
        print(plan, json.dumps(result["plans"][plan]), flush=True)
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
