"""Agreement with HF transformers on the same random weights: samebits' invariant GPU plan
(bfloat16 on cuda) against transformers' own model of the architecture, per preset.

For each preset (`samebits.model.random_init`): one `random_model(..., device, dtype)`; the HF
model (LlamaForCausalLM / Qwen3ForCausalLM / Qwen2ForCausalLM / MistralForCausalLM, from
`to_hf_config(cfg)`) gets the very same tensors (`load_state_dict(strict=True, assign=True)`;
tied embeddings: lm_head is the embedding tensor). Reported per model:

- logits over every position of one prompt (`samebits.deployment.cold_logits(..., all_rows=
  True)` against HF's forward): max |diff| / max |HF logit|, mean |diff|, and the fraction of
  positions whose argmax agrees;
- greedy generation, 16 steps, on a few prompts: HF `generate(do_sample=False)` (EOS off)
  against samebits `SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)`: equal or
  not, and the length of the common leading run;
- with the float32 reference (default on cuda): both against HF in float32 on the same
  weights (widened exactly), logits and greedy runs, to tell which side's rounding is larger;
  for a mixture of experts the same HF model computes it widened one layer at a time
  (`widened`: a 30B-A3B in float32 would not fit beside anything).

Random weights give logits ~N(0, 1) over the vocabulary (see random_init), so near-ties are
common and a greedy divergence after some steps is expected from bfloat16 rounding alone;
the logits numbers are the primary measure.

    python benchmarks/gpu_agreement.py            # tiny-llama, tiny-qwen3 (cuda, bfloat16)
    python benchmarks/gpu_agreement.py --big      # + llama-3-8b, qwen3-8b
    python benchmarks/gpu_agreement.py --device cpu   # float32 CPU plan (a check of this script)
    python benchmarks/gpu_agreement.py --presets /tmp/smollm2.gguf   # a real model (text prompts)
    python benchmarks/gpu_agreement.py --presets qwen3-8b --context 8192 --yarn 4:2048  # long, yarn
Writes JSON to $OUT/gpu_agreement.json when OUT is set, else ./gpu_agreement.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from collections.abc import Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import leading_matches  # noqa: E402
from hf_moe import hf_moe_config, hf_routing, is_moe_name, moe_state, our_routing, routing_report  # noqa: E402

DEFAULT_PRESETS = ("tiny-llama", "tiny-qwen3")
BIG_PRESETS = ("llama-3-8b", "qwen3-8b")
HF_CLASSES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "gemma3_text": "Gemma3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
}
DEVICE_DTYPE = {"cuda": "bfloat16", "cpu": "float32"}
LOGITS_PROMPT_LEN = 256
GREEDY_PROMPT_LENS = (7, 64, 200)
GREEDY_STEPS = 16
MAX_MODEL_LEN = 2048
TEXT_PROMPTS = (  # the greedy prompts of a real model (a path given as a preset)
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Once upon a time, in a small village by the sea,",
    "The three primary colors are",
)
# Recorded, not enforced: a bfloat16 forward through 32+ layers is not expected to be closer.
REL_DIFF_TARGET = 5e-2


# ---------------------------------------------------------------------------- HF side
def to_hf_config(cfg):
    """The transformers config of a samebits `ModelConfig` (inverse of `model_config_from_hf`)."""
    import transformers

    if cfg.gemma3 is not None:
        return _gemma3_hf_config(cfg)
    rope: dict = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling is not None and cfg.rope_scaling.rope_type == "yarn":
        rope.update(dataclasses.asdict(cfg.rope_scaling))
    elif cfg.rope_scaling is not None:
        s = cfg.rope_scaling
        rope.update(
            rope_type=s.rope_type, factor=s.factor, low_freq_factor=s.low_freq_factor,
            high_freq_factor=s.high_freq_factor,
            original_max_position_embeddings=s.original_max_position_embeddings,
        )  # fmt: skip
    common = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim, rms_norm_eps=cfg.rms_norm_eps,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=cfg.tie_word_embeddings, hidden_act="silu", rope_parameters=rope,
    )  # fmt: skip
    if cfg.model_type == "llama":
        return transformers.LlamaConfig(**common, attention_bias=False, mlp_bias=False)
    if cfg.model_type == "mistral":
        return transformers.MistralConfig(**common, sliding_window=None)
    if cfg.model_type == "qwen2":
        return transformers.Qwen2Config(**common, use_sliding_window=False)
    if cfg.model_type == "qwen3":
        return transformers.Qwen3Config(**common, use_sliding_window=False, attention_bias=False)
    if cfg.moe is not None:
        return hf_moe_config(cfg, common)
    raise ValueError(f"no HF class for model_type {cfg.model_type!r}")


def _gemma3_hf_config(cfg):
    """transformers' Gemma3TextConfig of a gemma3_text `ModelConfig` (linear or no scaling)."""
    import transformers

    g, full = cfg.gemma3, {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling is not None:
        full = {
            "rope_type": "linear",
            "factor": cfg.rope_scaling.factor,
            "rope_theta": cfg.rope_theta,
        }
    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": g.rope_local_theta},
            "full_attention": full}  # fmt: skip
    return transformers.Gemma3TextConfig(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads, num_key_value_heads=cfg.num_key_value_heads,
        head_dim=cfg.head_dim, rms_norm_eps=cfg.rms_norm_eps,
        max_position_embeddings=cfg.max_position_embeddings,
        tie_word_embeddings=cfg.tie_word_embeddings, hidden_activation="gelu_pytorch_tanh",
        layer_types=list(g.layer_types), sliding_window=g.sliding_window,
        query_pre_attn_scalar=int(g.query_pre_attn_scalar), rope_parameters=rope,
        final_logit_softcapping=g.final_logit_softcapping,
    )  # fmt: skip


def check_config_round_trip(cfg) -> None:
    """`model_config_from_hf(to_hf_config(cfg))` must give `cfg` back (raises otherwise)."""
    from samebits.model.config import model_config_from_hf

    hf_cfg = to_hf_config(cfg)
    raw = {**hf_cfg.to_dict(), "architectures": [HF_CLASSES[cfg.model_type]]}
    back = model_config_from_hf(raw)
    if back != cfg:
        raise AssertionError(f"to_hf_config does not round-trip:\n{cfg}\n!=\n{back}")


def hf_model(loaded, device: str, dtype, consume: bool = False):
    """transformers' model of `loaded.config`, its parameters being `loaded.weights` (shared
    tensors, no copy; a mixture of experts' experts are stacked copies, see `hf_moe`, popped
    from `loaded.weights` with `consume`); EOS is off in its generation config (`generate`
    runs every step)."""
    import torch
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    cls = getattr(transformers, HF_CLASSES[loaded.config.model_type])
    with torch.device(device):
        model = cls._from_config(to_hf_config(loaded.config), dtype=dtype)
    # weights of another dtype (a GGUF's float32 dequantization) are rounded to `dtype`, as
    # the invariant plan rounds them; the others are shared, not copied
    cfg = loaded.config
    experts = moe_state(loaded, dtype, consume) if cfg.moe is not None else {}
    state = {k: v if v.dtype == dtype else v.to(dtype) for k, v in loaded.weights.items()
             if not is_moe_name(k, cfg)}  # fmt: skip
    if cfg.tie_word_embeddings:
        state["lm_head.weight"] = state["model.embed_tokens.weight"]
    model.load_state_dict({**state, **experts}, strict=True, assign=True)
    _check_shared(model, state)
    model.eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


def _check_shared(model, state: dict) -> None:
    params = dict(model.named_parameters(remove_duplicate=False))
    for name, tensor in state.items():
        if params[name].data_ptr() != tensor.data_ptr():
            raise AssertionError(f"HF parameter {name} is not the samebits tensor")


def hf_logits(model, ids: list[int]):
    """float32 logits [len(ids), vocab] as numpy."""
    import torch

    device = next(model.parameters()).device
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([ids], device=device)).logits[0]
    return out.float().cpu().numpy()


def hf_greedy(model, ids: list[int], steps: int) -> list[int]:
    import torch

    device = next(model.parameters()).device
    x = torch.tensor([ids], device=device)
    with torch.inference_mode():
        out = model.generate(
            input_ids=x, attention_mask=torch.ones_like(x), do_sample=False,
            max_new_tokens=steps, min_new_tokens=steps,
        )  # fmt: skip
    return out[0, len(ids) :].tolist()


# ---------------------------------------------------------------------------- comparison
def random_prompt(vocab_size: int, length: int, seed: int) -> list[int]:
    """Uniform token ids below the three special ids random_init puts at the end."""
    import numpy as np

    rng = np.random.default_rng(seed)
    return rng.integers(0, vocab_size - 3, size=length).tolist()


def logits_agreement(ours, ref) -> dict:
    """Max/mean |ours - ref| (absolute and over max |ref|), and the argmax agreement."""
    import numpy as np

    diff = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
    scale = float(np.abs(ref).max())
    return {
        "positions": int(ref.shape[0]),
        "max_abs_logit": scale,
        "max_abs_diff": float(diff.max()),
        "mean_abs_diff": float(diff.mean()),
        "rel_max_diff": float(diff.max()) / scale,
        "argmax_agree_fraction": float((ours.argmax(-1) == ref.argmax(-1)).mean()),
        "finite": bool(np.isfinite(ours).all()),
    }


def our_greedy(llm, prompts: list[list[int]], steps: int) -> list[list[int]]:
    from samebits.sampling import SamplingParams

    params = SamplingParams(temperature=0.0, max_tokens=steps, ignore_eos=True)
    return [list(out.outputs[0].token_ids) for out in llm.generate(prompts, params)]


def greedy_agreement(ours: list[list[int]], hf, prompts: list[list[int]], steps: int) -> dict:
    """Our greedy runs (`our_greedy`) against HF's on the same prompts."""
    per_prompt = []
    for prompt, mine in zip(prompts, ours, strict=True):
        ref = hf_greedy(hf, prompt, steps)
        per_prompt.append(
            {
                "prompt_len": len(prompt), "equal": mine == ref,
                "leading_matches": leading_matches(mine, ref), "samebits": mine, "hf": ref,
            }
        )  # fmt: skip
    return {"all_equal": all(p["equal"] for p in per_prompt), "prompts": per_prompt}


def add_fp32_reference(result: dict, loaded, device: str, ids, prompts, ours_logits, hf_logits_):
    """Compare samebits and HF (both in the low dtype) with HF in float32 on the same weights
    (widened exactly): who is closer to the float32 model, and how far greedy runs stay on it."""
    import torch

    wide = dataclasses.replace(loaded, weights={k: v.float() for k, v in loaded.weights.items()})
    hf32 = hf_model(wide, device, torch.float32)
    compare_with_reference(result, hf32, ids, prompts, ours_logits, hf_logits_)
    del hf32, wide


def compare_with_reference(result: dict, ref_model, ids, prompts, ours_logits, hf_logits_):
    """`result` gains both sides' logits against `ref_model`'s and each greedy run's leading
    matches with the reference's run."""
    ref = hf_logits(ref_model, ids)
    result["logits_vs_fp32"] = {
        "samebits": logits_agreement(ours_logits, ref),
        "hf": logits_agreement(hf_logits_, ref),
    }
    for prompt, row in zip(prompts, result["greedy"]["prompts"], strict=True):
        row["hf_fp32"] = ref_run = hf_greedy(ref_model, prompt, GREEDY_STEPS)
        row["samebits_leading_vs_fp32"] = leading_matches(row["samebits"], ref_run)
        row["hf_leading_vs_fp32"] = leading_matches(row["hf"], ref_run)


@contextmanager
def widened(model, low_dtype):
    """The HF model `model` (weights in `low_dtype`) computing in float32 with peak memory of
    one float32 decoder layer: each layer is widened just before its forward and narrowed
    after (exact both ways: its weights are `low_dtype` values); the embeddings, final norm and
    lm_head stay widened inside the block. So it computes what the model built in float32 on
    the widened weights computes (test: `tests/unit/test_bench_widened.py`), where that model
    does not fit (a 30B-A3B: 122 GB)."""
    import torch

    def widen(module, _args):
        module.to(torch.float32)

    def narrow(module, _args, _out):
        module.to(low_dtype)

    hooks = [h for layer in model.model.layers
             for h in (layer.register_forward_pre_hook(widen), layer.register_forward_hook(narrow))]  # fmt: skip
    whole = (model.model.embed_tokens, model.model.norm, model.lm_head)
    for module in whole:
        module.to(torch.float32)
    # experts as transformers' own loop (its grouped_mm kernels are bf16-only on some builds)
    impl = getattr(model.config, "_experts_implementation", None)
    model.config._experts_implementation = "eager"
    try:
        yield model
    finally:
        model.config._experts_implementation = impl
        for h in hooks:
            h.remove()
        for module in whole:
            module.to(low_dtype)


def with_yarn(preset: str, yarn: str | None):
    """The preset's config with YaRN RoPE scaling `FACTOR:ORIGINAL` added (Qwen3's recipe for
    long contexts: 4:32768, max_position_embeddings kept); the preset name for `yarn` None."""
    if yarn is None:
        return preset
    from samebits.model.config import YarnRopeScaling
    from samebits.model.presets import PRESETS

    factor, original = yarn.split(":")
    scaling = YarnRopeScaling("yarn", float(factor), int(original))
    return dataclasses.replace(PRESETS[preset], rope_scaling=scaling)


def run_preset(
    preset: str,
    device: str,
    seed: int,
    fp32_reference: bool,
    context: int = LOGITS_PROMPT_LEN,
    yarn: str | None = None,
) -> dict:
    """Build both models of `preset` on `device` and compare them (see module docstring).
    A preset that is a path (a checkpoint folder or a GGUF file) loads that real model and
    takes TEXT_PROMPTS for its greedy runs. `context`: the logits prompt's length; `yarn`:
    see `with_yarn`."""
    import torch

    from samebits.deployment import build_deployment
    from samebits.engine.engine import LLMEngine
    from samebits.engine.runner import cold_logits
    from samebits.llm import LLM
    from samebits.model import load_model, weights_target
    from samebits.model.random_init import random_model

    dtype_name = DEVICE_DTYPE[device]
    start = time.monotonic()
    real = Path(preset).exists()
    if real:
        loaded = load_model(preset, False, weights_target(device, dtype_name))
    else:
        config = with_yarn(preset, yarn)
        loaded = random_model(config, seed=seed, device=device, dtype=getattr(torch, dtype_name))
    check_config_round_trip(loaded.config)
    max_model_len = max(MAX_MODEL_LEN, context + 256)
    deployment = build_deployment(
        loaded, "invariant", max_model_len=max_model_len, device=device, dtype=dtype_name
    )
    llm = LLM(engine=LLMEngine.from_deployment(deployment))
    built_s = time.monotonic() - start
    vocab = loaded.config.vocab_size
    ids = random_prompt(vocab, context, seed=seed)
    # (MoE) the routing of the very forward whose logits are compared
    ours, routed = our_routing(deployment, partial(cold_logits, deployment, ids, all_rows=True))
    prompts = [random_prompt(vocab, n, seed=seed + 1 + i) for i, n in enumerate(GREEDY_PROMPT_LENS)]
    if real:
        prompts = [loaded.tokenizer.encode(t, add_special_tokens=True) for t in TEXT_PROMPTS]
    our_runs, fingerprint = our_greedy(llm, prompts, GREEDY_STEPS), deployment.fingerprint
    del llm, deployment  # HF runs after: one model in memory at a time (a 30B-A3B is 61 GB)
    _free(device)
    moe = loaded.config.moe is not None
    low = getattr(torch, dtype_name)
    hf = hf_model(loaded, device, low, consume=moe)
    theirs = hf_logits(hf, ids)
    logits = logits_agreement(ours, theirs)
    result = {
        "preset": preset, "model": loaded.name, "device": device, "dtype": dtype_name,
        "rope_scaling": str(loaded.config.rope_scaling), "context": context,
        "fingerprint": fingerprint, "build_s": round(built_s, 1),
        "logits": logits, "greedy": greedy_agreement(our_runs, hf, prompts, GREEDY_STEPS),
        "rel_max_diff_within_target": logits["rel_max_diff"] < REL_DIFF_TARGET,
    }  # fmt: skip
    if moe:
        k = loaded.config.moe.num_experts_per_tok
        result["routing"] = routing_report(routed, hf_routing(hf, ids, k), k)
    if fp32_reference and moe:  # layer by layer: a float32 MoE model may not fit beside it
        with widened(hf, low):
            compare_with_reference(result, hf, ids, prompts, ours, theirs)
        result["fp32_reference"] = "layer-wise widened (`widened`)"
    del hf
    _free(device)
    if fp32_reference and not moe:
        add_fp32_reference(result, loaded, device, ids, prompts, ours, theirs)
    del loaded
    _free(device)
    result["wall_s"] = round(time.monotonic() - start, 1)
    return result


def _free(device: str) -> None:
    import torch

    from samebits.engine.heap import collect_all

    collect_all()  # engines freeze their start-up heap
    if device == "cuda":
        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------- main
def format_result(r: dict) -> str:
    """One line per model (two with the float32 reference)."""
    if "error" in r:
        return f"{r['preset']:12s} ERROR {r['error']}"
    lg, gr = r["logits"], r["greedy"]
    runs = ", ".join(f"{p['leading_matches']}/{GREEDY_STEPS}" for p in gr["prompts"])
    line = (
        f"{r['preset']:12s} max|diff|/max|logit| {lg['rel_max_diff']:.2e}  "
        f"mean|diff| {lg['mean_abs_diff']:.2e}  argmax agree {lg['argmax_agree_fraction']:.1%} "
        f"({lg['positions']} positions)  greedy equal {gr['all_equal']} (leading {runs})"
    )
    if "logits_vs_fp32" not in r:
        return line
    parts = []
    for who in ("samebits", "hf"):
        v = r["logits_vs_fp32"][who]
        lead = ", ".join(f"{p[who + '_leading_vs_fp32']}" for p in gr["prompts"])
        parts.append(
            f"{who} rel {v['rel_max_diff']:.2e} mean {v['mean_abs_diff']:.2e} "
            f"argmax {v['argmax_agree_fraction']:.1%} greedy leading {lead}"
        )
    return line + f"\n{'':12s} vs HF float32: " + "; ".join(parts)


def machine_info(device: str) -> dict:
    import torch
    import transformers

    info = {
        "torch": torch.__version__, "torch_cuda": torch.version.cuda,
        "transformers": transformers.__version__, "python": platform.python_version(),
    }  # fmt: skip
    if device == "cuda":
        import triton

        info.update(gpu=torch.cuda.get_device_name(0), triton=triton.__version__)
    return info


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", action="store_true", help=f"also {', '.join(BIG_PRESETS)}")
    parser.add_argument(
        "--presets", nargs="+", default=None,
        help=f"presets to compare (default: {', '.join(DEFAULT_PRESETS)})",
    )  # fmt: skip
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fp32-reference", action=argparse.BooleanOptionalAction, default=None,
        help="also compare both with HF in float32 on the same weights (default: on for cuda)",
    )  # fmt: skip
    parser.add_argument("--context", type=int, default=LOGITS_PROMPT_LEN,
                        help="tokens of the logits prompt (every position compared)")  # fmt: skip
    parser.add_argument("--yarn", default=None, metavar="FACTOR:ORIGINAL",
                        help="random presets get YaRN RoPE scaling (e.g. 4:32768)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default: see above)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_agreement.py needs a CUDA GPU (torch sees none); try --device cpu.")
        return 2
    presets = list(args.presets or DEFAULT_PRESETS) + (list(BIG_PRESETS) if args.big else [])
    out = args.out or Path(os.environ.get("OUT", ".")) / "gpu_agreement.json"
    fp32_reference = args.device == "cuda" if args.fp32_reference is None else args.fp32_reference
    results = []
    for preset in presets:
        try:
            result = run_preset(preset, args.device, args.seed, fp32_reference, args.context,
                                args.yarn)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - report and go on with the next model
            result = {"preset": preset, "error": f"{type(exc).__name__}: {exc}"[:500]}
        results.append(result)
        print(format_result(result), flush=True)
        data = {"machine": machine_info(args.device), "args": vars(args), "results": results}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1, default=str))
    print(f"JSON: {out}")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
