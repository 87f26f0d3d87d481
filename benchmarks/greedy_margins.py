"""Where greedy decoding is decidable in bf16: the float32 model's top-2 logit margin along its
own greedy path, for the real model's agreement prompts (`gpu_agreement.TEXT_PROMPTS`).

The GPU agreement run (`gpu_agreement.py --presets SmolLM2.gguf`) compares greedy tokens of
samebits' bf16 plan, HF transformers in bf16 and HF in float32 on the same weights. Where two
bf16 implementations part, this script shows how far apart the float32 model's first and
second tokens were at that step: a margin below the logits' bf16 error (the agreement run's
max |diff| is 0.6-2.5 logits; one bf16 ulp at |logit| 16-32 is 0.125) cannot decide the token.

    PYTHONPATH=src python benchmarks/greedy_margins.py [--model GGUF] [--steps 16] [--out F]

CPU only, float32 (HF transformers on the GGUF's dequantized weights, unrounded and rounded
to bf16). Evidence class: measurement.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from gpu_agreement import TEXT_PROMPTS, hf_model  # noqa: E402


def bf16_rounded(loaded):
    """`loaded` with every weight rounded to bf16 and widened back to float32."""
    import dataclasses

    import torch

    weights = {k: v.to(torch.bfloat16).to(torch.float32) for k, v in loaded.weights.items()}
    return dataclasses.replace(loaded, weights=weights)


def greedy_with_margins(model, ids: list[int], steps: int) -> list[dict]:
    """The model's own greedy path: per step the token, the runner-up and their margin."""
    import torch

    out, ids = [], list(ids)
    with torch.inference_mode():
        for _ in range(steps):
            row = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
            top = torch.topk(row, 2)
            first, second = top.indices.tolist()
            margin = float(top.values[0] - top.values[1])
            out.append({"token": first, "runner_up": second, "margin": margin})
            ids.append(first)
    return out


def main(argv=None) -> int:
    import torch

    from samebits.model import load_model, weights_target
    from samebits.model.loader import default_model_path

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=None, help="GGUF path (default: the embedded SmolLM2)")
    p.add_argument("--steps", type=int, default=16)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    loaded = load_model(
        args.model or str(default_model_path()), False, weights_target("cpu", "float32")
    )
    models = {"fp32": loaded, "fp32_bf16_weights": bf16_rounded(loaded)}
    result = []
    for text in TEXT_PROMPTS:
        ids = loaded.tokenizer.encode(text, add_special_tokens=True)
        row = {"prompt": text}
        for name, weights in models.items():
            path = greedy_with_margins(hf_model(weights, "cpu", torch.float32), ids, args.steps)
            row[name] = path
            margins = [round(s["margin"], 4) for s in path]
            print(f"{text[:24]!r:28} {name:18} tokens {[s['token'] for s in path]}")
            print(f"{'':28} {'':18} margins {margins}")
        result.append(row)
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
