"""The model presets: real architectures' shapes (and small ones for tests) as `ModelConfig`s.

One table for everything that names a model by its shapes without a checkpoint: random-weight
models (`samebits.model.random_init.random_model`), `samebits certify --model <preset>` and the
kernel prover's models (`samebits.analysis.kernel_prover.specs.MODELS`, via
`samebits.kernels.triton.certified.units.dims_of`). No torch here.
"""

from __future__ import annotations

from samebits.model.config import LinearRopeScaling, ModelConfig, MoeConfig, RopeScaling
from samebits.model.gemma3_config import FULL, SLIDING, Gemma3Attention

_LLAMA3_ROPE_8 = RopeScaling("llama3", 8.0, 1.0, 4.0, 8192)
_LLAMA3_ROPE_32 = RopeScaling("llama3", 32.0, 1.0, 4.0, 8192)


def _config(model_type: str, **fields) -> ModelConfig:
    defaults = dict(
        rope_scaling=None,
        tie_word_embeddings=False,
        attention_bias=model_type == "qwen2",
        qk_norm=model_type in ("qwen3", "qwen3_moe"),
    )
    return ModelConfig(model_type=model_type, **{**defaults, **fields})


def _gemma3(layers: int, window: int, scalar: float, pattern: int = 6, **fields) -> ModelConfig:
    """A Gemma 3 text shape: every `pattern`-th layer global (transformers' rule), the others
    sliding over `window` keys; q/k norms, tied embeddings, local RoPE base 10000."""
    kinds = tuple(SLIDING if (i + 1) % pattern else FULL for i in range(layers))
    gemma = Gemma3Attention(kinds, window, scalar)
    return _config(
        "gemma3_text", num_hidden_layers=layers, qk_norm=True, tie_word_embeddings=True,
        gemma3=gemma, **fields,
    )  # fmt: skip


def _mixtral_moe(experts: int, top_k: int, inter: int) -> MoeConfig:
    return MoeConfig(experts, top_k, inter, norm_topk_prob=True)


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
    # Qwen3-30B-A3B's config.json: 48 sparse layers of 128 experts (768 wide), 8 per token,
    # renormalized; 32 query heads over 4 KV heads, q/k norms.
    "qwen3-30b-a3b": _config(
        "qwen3_moe", vocab_size=151936, hidden_size=2048, intermediate_size=6144,
        num_hidden_layers=48, num_attention_heads=32, num_key_value_heads=4, head_dim=128,
        rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=40960,
        moe=MoeConfig(128, 8, 768, norm_topk_prob=True),
    ),
    # Mixtral-8x7B-v0.1's config.json: 32 sparse layers of 8 experts (14336 wide), 2 per token.
    "mixtral-8x7b": _config(
        "mixtral", vocab_size=32000, hidden_size=4096, intermediate_size=14336,
        num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        rms_norm_eps=1e-5, rope_theta=1000000.0, max_position_embeddings=32768,
        moe=_mixtral_moe(8, 2, 14336),
    ),
    # Gemma-3-12B's text_config (google/gemma-3-12b-it): 48 layers, 5 sliding (1024 keys) to
    # 1 global, 16 heads over 8 KV heads of 256, linear RoPE x8 on the global layers.
    "gemma-3-12b": _gemma3(
        48, 1024, 256.0, vocab_size=262208, hidden_size=3840, intermediate_size=15360,
        num_attention_heads=16, num_key_value_heads=8, head_dim=256, rms_norm_eps=1e-6,
        rope_theta=1000000.0, rope_scaling=LinearRopeScaling("linear", 8.0),
        max_position_embeddings=131072,
    ),
    # Small shapes for fast tests; head_dim and GQA group like the real ones.
    # Gemma 3's head_dim 256 and pattern; a window of 48 keys (prompts cross it, and spans).
    "tiny-gemma3": _gemma3(
        6, 48, 256.0, vocab_size=4096, hidden_size=256, intermediate_size=768,
        num_attention_heads=4, num_key_value_heads=2, head_dim=256, rms_norm_eps=1e-6,
        rope_theta=1000000.0, rope_scaling=LinearRopeScaling("linear", 8.0),
        max_position_embeddings=4096, pattern=3,
    ),
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
    # Qwen3-30B-A3B's head shape and routing (top 8, renormalized) with 16 small experts.
    "tiny-qwen3-moe": _config(
        "qwen3_moe", vocab_size=4096, hidden_size=256, intermediate_size=768,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=128,
        rms_norm_eps=1e-6, rope_theta=1000000.0, max_position_embeddings=4096,
        moe=MoeConfig(16, 8, 128, norm_topk_prob=True),
    ),
    "tiny-mixtral": _config(
        "mixtral", vocab_size=4096, hidden_size=256, intermediate_size=512,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
        rms_norm_eps=1e-5, rope_theta=1000000.0, max_position_embeddings=4096,
        moe=_mixtral_moe(8, 2, 512),
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
    # tests/tiny_models.py's Gemma 3 checkpoint (its GEMMA_ARCHS)
    "tiny-test-gemma3_text": _config(
        "gemma3_text", vocab_size=320, hidden_size=64, intermediate_size=128,
        num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        rms_norm_eps=1e-6, max_position_embeddings=1024, rope_theta=1000000.0,
        rope_scaling=LinearRopeScaling("linear", 8.0), qk_norm=True, tie_word_embeddings=True,
        gemma3=Gemma3Attention((SLIDING, FULL, SLIDING, SLIDING), 40, 24.0),
    ),
    # tests/tiny_models.py's mixture-of-experts checkpoints (its MOE_ARCHS)
    "tiny-test-qwen3_moe": _config(
        "qwen3_moe", vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
        max_position_embeddings=256, rope_theta=10000.0,
        moe=MoeConfig(8, 3, 32, norm_topk_prob=True),
    ),
    "tiny-test-qwen3_moe_mixed": _config(
        "qwen3_moe", vocab_size=320, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
        max_position_embeddings=256, rope_theta=10000.0,
        moe=MoeConfig(6, 2, 32, norm_topk_prob=False, decoder_sparse_step=2,
                      mlp_only_layers=(3,)),
    ),
    "tiny-test-mixtral": _config(
        "mixtral", vocab_size=320, hidden_size=64, intermediate_size=32, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-6,
        max_position_embeddings=256, rope_theta=1000000.0, moe=_mixtral_moe(8, 2, 32),
    ),
}  # fmt: skip
