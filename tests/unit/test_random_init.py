"""random_init: presets are valid real shapes, weights are seeded and bitwise reproducible, the
synthetic tokenizer covers any vocabulary, and a random model runs through the CPU engine."""

from __future__ import annotations

import json
import time

import pytest
import torch

from samebits.bits import same_bits
from samebits.model import LoadedModel, expected_weight_shapes
from samebits.model.config import model_config_from_hf
from samebits.model.presets import PRESETS
from samebits.model.random_init import (
    MIN_VOCAB,
    random_model,
    random_tokenizer,
    tensor_seed,
)

TINY = ["tiny-llama", "tiny-qwen3", "tiny-qwen2", "tiny-qwen3-moe", "tiny-mixtral", "tiny-gemma3"]
# Parameter counts of the real checkpoints (embeddings included, tied ones counted once).
REAL_PARAMS = {
    "llama-3-8b": 8.03e9,
    "qwen3-8b": 8.19e9,
    "llama-3.2-1b": 1.24e9,
    "qwen2-0.5b": 0.494e9,
    "qwen3-30b-a3b": 30.5e9,
    "mixtral-8x7b": 46.7e9,
}


def _same_bits(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(same_bits(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def tiny_llama() -> LoadedModel:
    return random_model("tiny-llama", seed=0)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_param_counts(preset):
    shapes = expected_weight_shapes(PRESETS[preset])
    count = sum(torch.Size(s).numel() for s in shapes.values())
    if preset in REAL_PARAMS:
        assert count == pytest.approx(REAL_PARAMS[preset], rel=0.01)
    assert PRESETS[preset].vocab_size >= MIN_VOCAB


@pytest.mark.parametrize(
    "arch",
    [
        "llama",
        "qwen2",
        "qwen3",
        "mistral",
        "qwen3_moe",
        "qwen3_moe_mixed",
        "mixtral",
        "gemma3_text",
    ],
)
def test_tiny_test_presets_are_the_tiny_checkpoints(arch, request):
    """The preset tiny-test-<arch> (the kernel prover's "tiny" model, the shipped certificates'
    tiny-test:<arch> units) is the config of tests/tiny_models.py's checkpoint of `arch`."""
    folder = request.getfixturevalue(f"tiny_{arch}_dir")
    config = model_config_from_hf(json.loads((folder / "config.json").read_text()))
    assert PRESETS[f"tiny-test-{arch}"] == config


@pytest.mark.parametrize("preset", TINY)
def test_tiny_presets_have_expected_shapes(preset):
    loaded = random_model(preset)
    expected = expected_weight_shapes(loaded.config)
    assert loaded.weights.keys() == expected.keys()
    for name, shape in expected.items():
        t = loaded.weights[name]
        assert tuple(t.shape) == shape, name
        assert t.dtype == torch.float32 and t.is_contiguous() and t.device.type == "cpu"
        assert torch.isfinite(t).all(), name
    assert loaded.name == f"random:{preset}:seed0"
    assert loaded.source_files == ()
    assert loaded.tokenizer.vocab_size == loaded.config.vocab_size


def test_weight_statistics(tiny_llama):
    w = tiny_llama.weights
    norm = w["model.layers.0.input_layernorm.weight"]
    assert (norm - 1).abs().max() < 0.2 and (norm != 1).any()
    q = w["model.layers.0.self_attn.q_proj.weight"]
    assert q.std().item() == pytest.approx(256**-0.5, rel=0.05)
    down = w["model.layers.0.mlp.down_proj.weight"]
    assert down.std().item() == pytest.approx((768 * 2 * 4) ** -0.5, rel=0.05)


def test_same_seed_same_bits_other_seed_differs(tiny_llama):
    again = random_model("tiny-llama", seed=0)
    assert _same_bits(tiny_llama.weights, again.weights)
    other = random_model("tiny-llama", seed=1)
    for name, t in tiny_llama.weights.items():
        assert not same_bits(t, other.weights[name]), name


def test_tensors_are_not_interchangeable(tiny_llama):
    w = tiny_llama.weights
    q0, q1 = (w[f"model.layers.{i}.self_attn.q_proj.weight"] for i in (0, 1))
    assert not torch.equal(q0, q1)
    assert tensor_seed(0, "a") != tensor_seed(0, "b") != tensor_seed(1, "b")


def test_num_layers_gives_a_prefix_of_the_full_model(tiny_llama):
    short = random_model("tiny-llama", num_layers=2)
    assert short.config.num_hidden_layers == 2
    assert short.weights.keys() == expected_weight_shapes(short.config).keys()
    assert _same_bits(short.weights, {k: tiny_llama.weights[k] for k in short.weights})


def test_bfloat16_is_float32_rounded(tiny_llama):
    half = random_model("tiny-llama", dtype=torch.bfloat16)
    for name, t in half.weights.items():
        assert t.dtype == torch.bfloat16
        assert same_bits(t, tiny_llama.weights[name].to(torch.bfloat16)), name


def test_config_and_unknown_preset():
    loaded = random_model(PRESETS["tiny-qwen3"], seed=3)
    assert loaded.name == "random:custom:seed3"
    with pytest.raises(KeyError, match="unknown preset"):
        random_model("llama-7")


def test_tokenizer_round_trip_and_every_id_decodes():
    tok = random_tokenizer(1000)
    assert tok.vocab_size == 1000
    for text in ["hello world", "Ünïcödé → 日本語 😀\n\tx", ""]:
        ids = tok.encode(text)
        assert tok.decode(ids) == text
    assert len(tok.encode("hello world")) > 0
    for token_id in range(tok.vocab_size):
        tok.token_to_str(token_id)
    assert tok.decode([300, 301]) == " t300 t301"
    assert tok.eos_token_ids == (999,)
    assert tok.encode("hi", add_special_tokens=True)[0] == tok.bos_token_id == 997
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert tok.encode(prompt).count(998) == 2  # <|im_start|> user, assistant
    with pytest.raises(ValueError, match="at least"):
        random_tokenizer(MIN_VOCAB - 1)


def test_tokenizer_for_a_large_vocab_is_fast():
    start = time.perf_counter()
    tok = random_tokenizer(151936)
    assert time.perf_counter() - start < 2.0
    assert tok.vocab_size == 151936
    assert tok.decode([151000]) == " t151000"


def test_runs_through_the_cpu_engine(tiny_llama):
    from samebits.engine.engine import LLMEngine
    from samebits.sampling import SamplingParams

    engine = LLMEngine.from_loaded(tiny_llama, kernel_plan="invariant")
    params = SamplingParams(temperature=0.0, max_tokens=6)
    prompts = {"a": "hello world", "b": "the quick brown fox"}
    for rid, text in prompts.items():
        engine.add_request(rid, engine.tokenizer.encode(text, add_special_tokens=True), params)
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out.outputs[0]
    assert not engine.pop_failures()
    assert done.keys() == prompts.keys()
    for out in done.values():  # EOS logits sit near 0: greedy runs to max_tokens
        assert len(out.token_ids) == 6 and out.finish_reason == "length"


def test_llm_generate_is_reproducible():
    from samebits.engine.engine import LLMEngine
    from samebits.llm import LLM
    from samebits.sampling import SamplingParams

    def run() -> list[int]:
        engine = LLMEngine.from_loaded(random_model("tiny-qwen3"), kernel_plan="invariant")
        params = SamplingParams(temperature=1.0, seed=7, max_tokens=5, ignore_eos=True)
        return LLM(engine=engine).generate("hello", params)[0].outputs[0].token_ids

    first = run()
    assert first == run() and len(first) == 5


def test_weights_identity_names_the_recipe(tiny_llama):
    identity = tiny_llama.weights_identity
    assert len(identity) == 64 and identity == random_model("tiny-llama").weights_identity
    others = [
        random_model("tiny-llama", seed=1),
        random_model("tiny-llama", num_layers=2),
        random_model("tiny-llama", dtype=torch.bfloat16),
    ]
    assert len({identity, *(m.weights_identity for m in others)}) == 4


@pytest.mark.parametrize("preset", ["tiny-qwen3-moe", "tiny-mixtral"])
def test_moe_weight_statistics(preset):
    """Router rows N(0, 1 / hidden) (router logits ~N(0, 1)); expert down projections (qwen3's
    down_proj, mixtral's w2) depth-scaled like the dense down_proj."""
    loaded = random_model(preset)
    cfg, w = loaded.config, loaded.weights
    block, down = (
        ("mlp", "down_proj") if cfg.model_type == "qwen3_moe" else ("block_sparse_moe", "w2")
    )
    router = w[f"model.layers.0.{block}.gate.weight"]
    assert router.shape == (cfg.moe.num_experts, cfg.hidden_size)
    assert router.std().item() == pytest.approx(cfg.hidden_size**-0.5, rel=0.1)
    inter = cfg.moe.moe_intermediate_size
    expert_down = w[f"model.layers.1.{block}.experts.3.{down}.weight"]
    expected = (inter * 2 * cfg.num_hidden_layers) ** -0.5
    assert expert_down.std().item() == pytest.approx(expected, rel=0.1)


def test_moe_model_runs_through_the_cpu_engine():
    from samebits.engine.engine import LLMEngine
    from samebits.llm import LLM
    from samebits.sampling import SamplingParams

    engine = LLMEngine.from_loaded(random_model("tiny-qwen3-moe"), kernel_plan="invariant")
    params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
    outs = LLM(engine=engine).generate(["hello", "the quick brown fox"], params)
    assert [len(o.outputs[0].token_ids) for o in outs] == [5, 5]
