"""Issue 28 on a GPU: published shapes that nobody proved certificates for, deployed on the
GPU invariant plan by the shipped certificate set alone (no per-model proving; the gate
fails closed, so a deployment that builds is certified).

Per shape (`analysis/published_shapes.py`, the published config.json numbers; random bf16
weights drawn on the CPU) and per vocabulary (as published; padded by `--pad` for `--pad-models`): the
engine is built with `SAMEBITS_ALLOW_UNCERTIFIED` unset, its fingerprint's certificate
status read, and one prompt generated alone and inside a batch of three: the digests must
be equal (bytes of the logits, batch invariance). Build seconds and decode tokens/s.

    python benchmarks/deploy_published.py --out deploy_published.json
Evidence class: measurement (and the gate's check of the shipped certificates).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402

from samebits import SamplingParams  # noqa: E402
from samebits.analysis.published_shapes import ALL_PUBLISHED as PUBLISHED  # noqa: E402
from samebits.engine.engine import LLMEngine  # noqa: E402
from samebits.llm import LLM  # noqa: E402
from samebits.model.config import model_config_from_hf  # noqa: E402
from samebits.model.random_init import random_model  # noqa: E402

PROMPTS = [[11, 22, 33, 44, 55, 66, 77, 88], [5, 6, 7], [101, 202, 303, 404, 505]]


def deploy(raw: dict, device: str) -> tuple[LLM, float]:
    """A random-weight model of `raw`'s shapes, deployed on `device` (weights drawn on the CPU)."""
    start = time.perf_counter()
    dtype = torch.bfloat16 if device == "cuda" else torch.float32  # the CPU plan's weights
    loaded = random_model(model_config_from_hf(raw), 0, "cpu", dtype)
    loaded.weights.update({n: w.to(device) for n, w in loaded.weights.items()})
    engine = LLMEngine.from_loaded(loaded, release_sources=True, device=device,
                                   max_model_len=2048)  # fmt: skip
    return LLM(engine=engine), time.perf_counter() - start


def digests(llm: LLM, prompts: list[list[int]], max_tokens: int) -> list[list[str]]:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return [list(o.outputs[0].logits_digests) for o in llm.generate(prompts, params)]


def run_shape(name: str, pad: int, device: str, max_tokens: int) -> dict:
    raw = {**PUBLISHED[name], "vocab_size": PUBLISHED[name]["vocab_size"] + pad}
    llm, build_s = deploy(raw, device)
    certs = llm.engine.deployment.components.get("certificates") or {}
    alone = digests(llm, PROMPTS[:1], max_tokens)[0]
    start = time.perf_counter()
    batch = digests(llm, PROMPTS, max_tokens)
    batch_s = time.perf_counter() - start
    row = {"model": name, "vocab_size": raw["vocab_size"], "build_s": round(build_s, 1),
           "certificates": certs.get("status"), "units": len(certs.get("units", [])),
           "op_by_op": certs.get("op_by_op", []),
           "alone_equals_batched": alone == batch[0], "tokens": max_tokens,
           "batch3_tok_s": round(3 * max_tokens / batch_s, 1)}  # fmt: skip
    return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="llama-3.2-3b,qwen3-4b,qwen2.5-7b,mistral-nemo-12b")
    p.add_argument("--pad", type=int, default=1000, help="vocabulary padding of a second run")
    p.add_argument("--pad-models", default="llama-3.2-3b", help="the models run padded too")
    p.add_argument("--device", default="cuda")
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--one", default="", help=argparse.SUPPRESS)
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "deploy.json"))
    a = p.parse_args()
    if os.environ.pop("SAMEBITS_ALLOW_UNCERTIFIED", None):
        print("SAMEBITS_ALLOW_UNCERTIFIED unset for this run", file=sys.stderr)
    rows = []
    runs = [(name, 0) for name in a.models.split(",")]
    runs += [(name, a.pad) for name in a.pad_models.split(",") if name]
    if a.one:  # one shape in this process (the parent runs each in its own: GPU memory)
        name, pad = a.one.rsplit(":", 1)
        try:
            row = run_shape(name, int(pad), a.device, a.max_tokens)
        except Exception as exc:  # a refusal by the gate is a result too
            row = {"model": name, "pad": int(pad), "error": f"{type(exc).__name__}: {exc}"}
        print("ROW " + json.dumps(row), flush=True)
        return
    for name, pad in runs:
        cmd = [sys.executable, __file__, "--one", f"{name}:{pad}", "--device", a.device,
               "--max-tokens", str(a.max_tokens)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = [ln[4:] for ln in proc.stdout.splitlines() if ln.startswith("ROW ")]
        rows.append(json.loads(found[-1]) if found else
                    {"model": name, "pad": pad, "error": proc.stderr[-2000:]})  # fmt: skip
        print(json.dumps(rows[-1]), flush=True)
        Path(a.out).write_text(json.dumps({"device": a.device, "rows": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
