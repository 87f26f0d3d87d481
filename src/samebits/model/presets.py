"""The model presets: real architectures' shapes (and small ones for tests) as `ModelConfig`s.

One table for everything that names a model by its shapes without a checkpoint: random-weight
models (`samebits.model.random_init.random_model`), `samebits certify --model <preset>` and the
kernel prover's models (`samebits.analysis.kernel_prover.specs.MODELS`, via
`samebits.kernels.triton.certified.units.dims_of`). No torch here.
"""

from __future__ import annotations

from samebits.model.config import ModelConfig, RopeScaling

_LLAMA3_ROPE_8 = RopeScaling("llama3", 8.0, 1.0, 4.0, 8192)
_LLAMA3_ROPE_32 = RopeScaling("llama3", 32.0, 1.0, 4.0, 8192)


def _config(model_type: str, **fields) -> ModelConfig:
    defaults = dict(
        rope_scaling=None,
        tie_word_embeddings=False,
        attention_bias=model_type == "qwen2",
        qk_norm=model_type == "qwen3",
    )
    return ModelConfig(model_type=model_type, **{**defaults, **fields})


# Real shapes. max_position_embeddings is the checkpoint's own value; the engine caps the
# context (and its RoPE tables) at max_model_len when one is given.
PRESETS: dict[str, ModelConfig] = {
    # Llama-3.1-8B's config.json (Llama-3-8B's shapes, with the 3.1 RoPE scaling and context).
    "llama-3-8b": _config(
        "llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        rms_norm_eps=1e-5, rope_theta=500000.0, rope_scaling=_LLAMA3_ROPE_8,
        max_position_embeddings=131072,
    ),
    "llama-3.2-1b": _config(
        "llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192,
        num_hidden_layers=16, num_attention_heads=32, num_key_value_heads=8, head_dim=64,
        rms_norm_eps=1e-5, rope_theta=500000.0, rope_scaling=_LLAMA3_ROPE_32,
        max_position_embeddings=131072, tie_word_embeddings=True,
    ),
    "qwen3-8b": _config(
        "qwen3", vocab_size=151936, hidden_size=4096, intermediate_size=12288,
        num_hidden_layers=36, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=40960,
    ),
    # Qwen2.5-0.5B's shapes (qkv bias, tied embeddings, 14 heads over 2 KV heads).
    "qwen2-0.5b": _config(
        "qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
        num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2, head_dim=64,
        rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=32768,
        tie_word_embeddings=True,
    ),
    # Small shapes for fast tests; head_dim and GQA group like the real ones.
    "tiny-llama": _config(
        "llama", vocab_size=4096, hidden_size=256, intermediate_size=768,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 256),
        max_position_embeddings=4096,
    ),
    # q_size (4 * 128) differs from hidden_size, as in real qwen3 models.
    "tiny-qwen3": _config(
        "qwen3", vocab_size=4096, hidden_size=256, intermediate_size=768,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=128,
        rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=4096,
    ),
    "tiny-qwen2": _config(
        "qwen2", vocab_size=4096, hidden_size=256, intermediate_size=768,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=4096,
        tie_word_embeddings=True,
    ),
    # tests/tiny_models.py's 2-layer checkpoints (its _DIMS, one per architecture, as
    # model_config_from_hf reads their config.json): the kernel prover's "tiny" model and the
    # shipped certificates' tiny-test:<arch> units (tests/unit/test_random_init.py checks them)
    **{f"tiny-test-{arch}": _config(
        arch, vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
        max_position_embeddings=256, **rope,
    ) for arch, rope in (
        ("llama", dict(rope_theta=50000.0, rope_scaling=RopeScaling("llama3", 8.0, 1.0, 4.0, 64))),
        ("qwen2", dict(rope_theta=10000.0)), ("qwen3", dict(rope_theta=10000.0)),
        ("mistral", dict(rope_theta=10000.0)),
    )},
}  # fmt: skip
