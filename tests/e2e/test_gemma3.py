"""Gemma 3 text models: a tiny Gemma3ForCausalLM made with transformers (sliding window 40 on
three of four layers, linear RoPE scaling on the global one, query_pre_attn_scalar 24, tied
embeddings) agrees with transformers in float32 (max|Δ| / max|ref| <= 1e-4 at every position)
for prompts past the window and past the 512-key attention span, on both CPU plans; ignoring
the window misses by far (so the comparison can fail); a soft-capped variant agrees too; the
text part of a multimodal gemma3 checkpoint (both weight layouts) loads to the same weights
and logits; config parsing fills transformers' defaults and refuses what it cannot run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from samebits.bits import same_bits
from samebits.deployment import build_deployment
from samebits.engine.runner import cold_logits
from samebits.model import load_model
from samebits.model.config import LinearRopeScaling, model_config_from_hf
from samebits.model.errors import ModelLoadError
from samebits.model.gemma3_config import FULL, SLIDING

TOL = 1e-4
WINDOW = 40


def _prompt(vocab: int, length: int, seed: int = 0) -> list[int]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (length,), generator=gen).tolist()


def _relative_error(dep, hf, ids) -> float:
    ours = torch.from_numpy(cold_logits(dep, ids, all_rows=True))
    with torch.no_grad():
        ref = hf(torch.tensor([ids])).logits[0].float()
    assert ours.shape == ref.shape
    return float((ours - ref).abs().max() / ref.abs().max())


def _hf(path: Path, **config):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, **config).eval()


@pytest.fixture(scope="module")
def hf_gemma(tiny_gemma3_text_dir):
    return _hf(tiny_gemma3_text_dir)


@pytest.mark.parametrize("length", [120, 600])
@pytest.mark.parametrize("plan", ["invariant", "fast"])
def test_tiny_gemma3_agrees_with_transformers(tiny_gemma3_text_dir, hf_gemma, plan, length):
    dep = build_deployment(load_model(tiny_gemma3_text_dir), plan)
    assert dep.config.gemma3.sliding_window == WINDOW < length
    rel = _relative_error(dep, hf_gemma, _prompt(dep.config.vocab_size, length, seed=length))
    assert rel <= TOL, f"relative max error {rel:.3e}"


def test_ignoring_the_window_misses_transformers(tiny_gemma3_text_dir, hf_gemma):
    """The negative control: transformers without the window (every layer global in its mask)
    is far from our windowed logits, and our logits with the window are close to its own."""
    ids = _prompt(320, 120, seed=3)
    dep = build_deployment(load_model(tiny_gemma3_text_dir), "invariant")
    unwindowed = _hf(tiny_gemma3_text_dir, sliding_window=4096)
    assert _relative_error(dep, unwindowed, ids) > 100 * TOL
    assert _relative_error(dep, hf_gemma, ids) <= TOL


def test_soft_capped_gemma_agrees(tmp_path):
    from tiny_models import make_tiny_checkpoint

    path = make_tiny_checkpoint(tmp_path / "capped", "gemma3_text", final_logit_softcapping=2.0)
    dep = build_deployment(load_model(path), "invariant")
    assert dep.config.gemma3.final_logit_softcapping == 2.0
    ids = _prompt(320, 64, seed=4)
    assert _relative_error(dep, _hf(path), ids) <= TOL
    assert float(torch.from_numpy(cold_logits(dep, ids, all_rows=True)).abs().max()) < 2.0


# --- the text part of a multimodal gemma3 checkpoint ----------------------------------------

_LAYOUTS = {
    "transformers5": lambda n: "model.language_model." + n[len("model.") :],
    "hub": lambda n: "language_model." + n,
}


def _multimodal_copy(src: Path, dst: Path, layout: str) -> Path:
    """`src` (a gemma3_text folder) rewritten as a Gemma3ForConditionalGeneration folder:
    config under `text_config`, text weights renamed, a vision tower and projector added."""
    dst.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        (dst / name).write_bytes((src / name).read_bytes())
    text = json.loads((src / "config.json").read_text())
    text.pop("architectures")
    config = {
        "model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
        "text_config": text, "vision_config": {"model_type": "siglip_vision_model"},
        "mm_tokens_per_image": 4,
    }  # fmt: skip
    (dst / "config.json").write_text(json.dumps(config))
    weights = {_LAYOUTS[layout](n): t for n, t in load_file(str(src / "model.safetensors")).items()}
    vision = "vision_tower.vision_model.embeddings.patch_embedding.weight"
    prefix = "model." if layout == "transformers5" else ""
    weights[prefix + vision] = torch.ones(8, 3, 2, 2)
    weights[prefix + "multi_modal_projector.mm_input_projection_weight"] = torch.ones(8, 64)
    save_file(weights, str(dst / "model.safetensors"))
    return dst


@pytest.mark.parametrize("layout", sorted(_LAYOUTS))
def test_multimodal_checkpoint_loads_its_text_part(tiny_gemma3_text_dir, tmp_path, layout):
    text = load_model(tiny_gemma3_text_dir)
    mm = load_model(_multimodal_copy(tiny_gemma3_text_dir, tmp_path / layout, layout))
    assert mm.config == text.config
    assert sorted(mm.weights) == sorted(text.weights)
    assert all(same_bits(mm.weights[n], text.weights[n]) for n in text.weights)
    ids = _prompt(320, 60, seed=5)
    a = cold_logits(build_deployment(mm, "invariant"), ids, all_rows=True)
    b = cold_logits(build_deployment(text, "invariant"), ids, all_rows=True)
    assert same_bits(a, b)


# --- config parsing ---------------------------------------------------------------------


def _hub_text_config(**fields) -> dict:
    """A config.json as the hub's Gemma 3 checkpoints write it: defaults left out."""
    return {"model_type": "gemma3_text", "hidden_size": 3840, "intermediate_size": 15360,
            "num_hidden_layers": 48, "num_attention_heads": 16, "num_key_value_heads": 8,
            "sliding_window": 1024, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
            **fields}  # fmt: skip


def test_hub_config_gets_transformers_defaults():
    cfg = model_config_from_hf(_hub_text_config())
    g = cfg.gemma3
    assert (cfg.vocab_size, cfg.head_dim, cfg.max_position_embeddings) == (262208, 256, 131072)
    assert cfg.rope_theta == 1e6 and cfg.rope_scaling == LinearRopeScaling("linear", 8.0)
    assert g.rope_local_theta == 10000.0 and g.query_pre_attn_scalar == 256.0
    assert cfg.tie_word_embeddings and cfg.qk_norm
    # sliding_window_pattern 6: every sixth layer global
    assert [i for i, k in enumerate(g.layer_types) if k == FULL] == list(range(5, 48, 6))
    assert g.window(0) == 1024 and g.window(5) == 0


def test_sliding_window_pattern_and_local_base_freq():
    raw = _hub_text_config(sliding_window_pattern=2, rope_local_base_freq=5000.0)
    g = model_config_from_hf(raw).gemma3
    assert g.layer_types[:4] == (SLIDING, FULL, SLIDING, FULL)
    assert g.rope_local_theta == 5000.0


def test_multimodal_config_reads_text_config():
    raw = {"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
           "text_config": _hub_text_config(), "vision_config": {}}  # fmt: skip
    assert model_config_from_hf(raw) == model_config_from_hf(_hub_text_config())


@pytest.mark.parametrize(
    "fields, match",
    [
        (dict(hidden_activation="gelu"), "hidden_activation"),
        (dict(attn_logit_softcapping=50.0), "attn_logit_softcapping"),
        (dict(use_bidirectional_attention=True), "use_bidirectional_attention"),
        (dict(layer_types=["sliding_attention"] * 3), "layer_types"),
        (dict(layer_types=["local"] * 48), "layer_types"),
        (dict(sliding_window=0), "sliding_window"),
        (dict(query_pre_attn_scalar=-1), "query_pre_attn_scalar"),
        (dict(rope_parameters={"sliding_attention": {"rope_type": "linear", "factor": 2.0}}),
         "sliding_attention"),
    ],
)  # fmt: skip
def test_bad_gemma3_configs_are_refused(fields, match):
    with pytest.raises(ValueError, match=match):
        model_config_from_hf(_hub_text_config(**fields))


def test_multimodal_config_without_text_config_is_refused(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gemma3"}))
    with pytest.raises(ModelLoadError, match="text_config"):
        load_model(tmp_path)
