"""What a user who does not tune gets on a GPU (issue 25, item 4): workload (b) of
`gpu_serving.py` (64 x (128 in, 256 out), greedy) on an engine built with no scheduler or
cache keyword at all, side by side in one process with the same engine given the CPU-sized
budgets every device had before (`max_num_seqs` 32, `max_num_batched_tokens` 512). Random
Llama-3-8B-shaped weights in bfloat16, the invariant plan, everything else at its default.

    python benchmarks/untuned_defaults.py --out $OUT/untuned_defaults.json

Runs: default, old budgets, default again (the spread between the two default runs is the
noise). Each run is cold (prefix cache dropped), after one warm-up of 4 requests.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_serving import release, run_engine, workload_b  # noqa: E402

OLD_BUDGETS = {"max_num_seqs": 32, "max_num_batched_tokens": 512}


def one_run(dep, jobs, **budgets) -> dict:
    """Workload (b) on a fresh engine over `dep` with only `budgets` given."""
    from samebits import LLM
    from samebits.engine.engine import LLMEngine

    llm = LLM(engine=LLMEngine.from_deployment(dep, **budgets))
    sched = llm.engine.config.scheduler_config
    run_engine(llm, jobs[:4])  # warm-up
    out = run_engine(llm, jobs)
    result = {"budgets": [sched.max_num_seqs, sched.max_num_batched_tokens],
              "tok_s": out["tok_s"], "wall_s": out["wall_s"], "tokens": out["tokens"]}  # fmt: skip
    del llm, out
    release()
    return result


def main() -> int:
    import torch

    from samebits.deployment import build_deployment
    from samebits.model.random_init import random_model

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--preset", default="llama-3-8b")
    p.add_argument("--out", default="untuned_defaults.json")
    args = p.parse_args()
    loaded = random_model(args.preset, seed=0, device="cuda", dtype=torch.bfloat16)
    dep = build_deployment(loaded, "invariant", device="cuda")
    jobs = workload_b(dep.config.vocab_size, quick=False)
    runs = {
        "default_1": one_run(dep, jobs),
        "old_budgets": one_run(dep, jobs, **OLD_BUDGETS),
        "default_2": one_run(dep, jobs),
    }
    print(json.dumps(runs), flush=True)
    Path(args.out).write_text(json.dumps({"preset": args.preset, "runs": runs}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
