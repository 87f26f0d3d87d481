"""`LLM(tiny, tensor_parallel_size=2)` on the CPU (two processes over gloo) against TP = 1:
the same token ids and logits digests for greedy and seeded requests, in batches and with
chunked prefill; Ref's rows bitwise equal; the determinism matrix at TP = 2; the same
fingerprint, the degree recorded as topology; bad degrees refused before any rank starts."""

from __future__ import annotations

import pytest

from samebits import LLM
from samebits.engine.engine import LLMEngine
from samebits.engine.runner import cold_logits
from samebits.kernels.cpu import native
from samebits.sampling import SamplingParams
from samebits.testing.determinism_matrix import MatrixSize, full_check, full_check_problems

pytestmark = pytest.mark.skipif(not native.available(), reason="needs the native C kernels")

PROMPTS = [
    "hello world", "The quick brown fox jumps", "def add(a, b):", "a", "lazy dog " * 7,
    "return a + b", "0123456789 abcdefghij",
]  # fmt: skip


def _params() -> list[SamplingParams]:
    out = []
    for i, _ in enumerate(PROMPTS):
        if i % 2:
            out.append(SamplingParams(max_tokens=6, temperature=0.9, top_p=0.95, seed=i))
        else:
            out.append(SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True))
    return out


@pytest.fixture(scope="module")
def engines(tiny_tp_llama_dir):
    """(TP = 1 LLM, TP = 2 LLM) on the tiny Llama; the TP = 2 ranks stop at the end."""
    tp1 = LLM(str(tiny_tp_llama_dir), num_threads=1)
    tp2 = LLM(str(tiny_tp_llama_dir), num_threads=1, tensor_parallel_size=2)
    yield tp1, tp2
    tp2.close()


def _views(outputs) -> list[tuple]:
    return [(tuple(o.outputs[0].token_ids), tuple(o.outputs[0].logits_digests)) for o in outputs]


def test_same_fingerprint_degree_as_topology(engines):
    tp1, tp2 = engines
    assert tp1.fingerprint == tp2.fingerprint
    components = tp2.engine.deployment.components
    assert components["topology"] == {
        "tensor_parallel_size": 2, "backend": "gloo", "launcher": "spawn",
    }  # fmt: skip
    assert "topology" not in tp1.engine.deployment.components
    assert tp2.engine.config.runtime_config.tensor_parallel_size == 2


def test_batched_greedy_and_seeded_equal_tp1(engines):
    tp1, tp2 = engines
    expected = _views(tp1.generate(PROMPTS, _params()))
    assert _views(tp2.generate(PROMPTS, _params())) == expected
    alone = [_views(tp2.generate([p], [q]))[0] for p, q in zip(PROMPTS, _params(), strict=True)]
    assert alone == expected


@pytest.mark.parametrize("budget", [3, 7])
def test_chunked_prefill_equal_tp1(engines, budget):
    tp1, tp2 = engines
    expected = _views(tp1.generate(PROMPTS, _params()))
    chunked = LLMEngine.from_deployment(
        tp2.engine.deployment, max_num_batched_tokens=budget, max_num_seqs=3
    )
    assert _views(LLM(engine=chunked).generate(PROMPTS, _params())) == expected


def test_reference_rows_bitwise_equal_tp1(engines):
    """Every position's logits row of the spec's Ref (cold, batch of one), byte for byte."""
    tp1, tp2 = engines
    for prompt in PROMPTS[:3]:
        ids = tp1.tokenizer.encode(prompt)
        a = cold_logits(tp1.engine.deployment, ids, all_rows=True)
        b = cold_logits(tp2.engine.deployment, ids, all_rows=True)
        assert a.shape == b.shape and a.tobytes() == b.tobytes()


def test_determinism_matrix_tp2(engines, record_property):
    dep = engines[1].engine.deployment
    report, hits = full_check(dep, MatrixSize(vocab=dep.config.vocab_size, repeats=1))
    record_property("matrix", f"tiny-llama at TP = 2 (gloo, 2 ranks): {report.summary()}")
    print(report.summary())
    assert full_check_problems(report, hits) == []
    assert report.total_rows >= 300


@pytest.mark.parametrize("bad", [0, -1, True, "2", 2.0])
def test_degree_not_a_positive_int(tiny_tp_llama_dir, bad):
    with pytest.raises(ValueError, match="tensor_parallel_size must be a positive integer"):
        LLM(str(tiny_tp_llama_dir), tensor_parallel_size=bad)


def test_degree_not_supported(tiny_tp_llama_dir):
    with pytest.raises(ValueError, match=r"one of \(1, 2, 4, 8\)"):
        LLM(str(tiny_tp_llama_dir), num_threads=1, tensor_parallel_size=3)


def test_degree_not_dividing_heads(tiny_tp_llama_dir):
    """The tiny Llama has 4 heads and 2 KV heads: 4 ranks would need KV heads replicated."""
    with pytest.raises(ValueError, match=r"does not divide num_key_value_heads \(2\)"):
        LLM(str(tiny_tp_llama_dir), num_threads=1, tensor_parallel_size=4)
    with pytest.raises(ValueError, match=r"does not divide num_attention_heads \(4\)"):
        LLM(str(tiny_tp_llama_dir), num_threads=1, tensor_parallel_size=8)


def test_model_without_the_split_refused(tiny_llama_dir):
    """The default tiny Llama's o has K = 64: one chain (no 8 ranges of 32) cannot be cut."""
    with pytest.raises(ValueError, match=r"has 1 K ranges; tensor_parallel_size 2 does not"):
        LLM(str(tiny_llama_dir), num_threads=1, tensor_parallel_size=2)


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_qkv_bias_and_qk_norm_equal_tp1(make_tiny_tp, engines, arch):
    """Qwen2 (qkv bias, sharded with its rows) and Qwen3 (q / k norms, replicated)."""
    engines[1].close()  # one tensor-parallel engine per process at a time
    path = str(make_tiny_tp(arch))
    expected = _views(LLM(path, num_threads=1).generate(PROMPTS, _params()))
    tp2 = LLM(path, num_threads=1, tensor_parallel_size=2)
    try:
        assert _views(tp2.generate(PROMPTS, _params())) == expected
    finally:
        tp2.close()


def test_random_preset_tied_head_equal_tp1(engines):
    """A random-weight preset (the other rank rebuilds the same weights from its recipe) with
    a tied LM head (the vocab blocks cut from the embedding), 4096 ids over two ranks."""
    from samebits.model.random_init import random_model

    engines[1].close()
    tp1 = LLM(engine=LLMEngine.from_loaded(random_model("tiny-qwen2", seed=3), num_threads=1))
    tp2 = LLM(
        engine=LLMEngine.from_loaded(
            random_model("tiny-qwen2", seed=3), num_threads=1, tensor_parallel_size=2
        )
    )
    try:
        prompts = [[5, 17, 300 + i, 4000 - i] * (i + 1) for i in range(4)]
        params = [SamplingParams(max_tokens=5, temperature=0.7 * (i % 2), seed=i)
                  for i in range(4)]  # fmt: skip
        assert _views(tp2.generate(prompts, params)) == _views(tp1.generate(prompts, params))
        assert tp1.fingerprint == tp2.fingerprint
    finally:
        tp2.close()


def test_stored_16bit_weights_equal_tp1(tmp_path_factory, engines):
    """A bfloat16 checkpoint: each rank's kernels read their blocks' stored 16-bit form (the
    row-parallel K blocks too) and give the TP = 1 bits."""
    import torch

    from tiny_models import make_tiny_checkpoint

    engines[1].close()
    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp("tiny_tp_bf16"), "llama", dtype=torch.bfloat16,
        head_dim=64, intermediate_size=256,
    )  # fmt: skip
    expected = _views(LLM(str(path), num_threads=1).generate(PROMPTS, _params()))
    tp2 = LLM(str(path), num_threads=1, tensor_parallel_size=2)
    try:
        layer = tp2.engine.deployment.model.local.layers[0]
        linears = (layer.qkv, layer.o, layer.gate_up, layer.down)
        assert [lin.local.format for lin in linears] == ["BF16"] * 4
        assert _views(tp2.generate(PROMPTS, _params())) == expected
    finally:
        tp2.close()


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_1"])
def test_gguf_blocks_equal_tp1(tmp_path, engines, qtype):
    """A GGUF file of Q8_0 / Q4_1 weights: each rank reads whole blocks of its weight blocks
    (o / down: 128 k each, 4 blocks) and gives the TP = 1 bits. (hidden 256 = 4 heads x 64:
    the tests' GGUF writer records no separate head size.)"""
    import gguf

    from tiny_models import make_tiny_checkpoint, write_tiny_gguf

    engines[1].close()
    hf = make_tiny_checkpoint(
        tmp_path / "hf", "llama", hidden_size=256, head_dim=64, intermediate_size=256
    )
    weight_type = getattr(gguf.GGMLQuantizationType, qtype)
    path = str(write_tiny_gguf(tmp_path / f"tiny.{qtype}.gguf", hf, weight_type))
    ids = [[5, 9, 40 + i, 200 - i] * (i + 2) for i in range(4)]
    params = [SamplingParams(max_tokens=5, temperature=0.6 * (i % 2), seed=i) for i in range(4)]
    expected = _views(LLM(path, num_threads=1).generate(ids, params))
    tp2 = LLM(path, num_threads=1, tensor_parallel_size=2)
    try:
        layer = tp2.engine.deployment.model.local.layers[0]
        assert layer.o.local.format == qtype and layer.down.local.format == qtype
        assert _views(tp2.generate(ids, params)) == expected
    finally:
        tp2.close()


def test_moe_refused(tiny_qwen3_moe_dir):
    with pytest.raises(ValueError, match="mixture-of-experts"):
        LLM(str(tiny_qwen3_moe_dir), num_threads=1, tensor_parallel_size=2)


@pytest.mark.parametrize("command", ["generate", "serve", "verify", "info"])
def test_cli_flag(command):
    from samebits.cli import build_parser
    from samebits.engine_args import config_from_args

    extra = {"generate": ["hi"], "verify": ["log.jsonl"]}.get(command, [])
    args = build_parser().parse_args([command, *extra, "--tensor-parallel-size", "2"])
    assert args.tensor_parallel_size == 2
    if command != "verify":
        assert config_from_args(args).runtime_config.tensor_parallel_size == 2
