"""config.json dicts of published checkpoints (the fields samebits reads, with the numbers of
the models' published config.json files): `samebits certify --covers published:<name>` and
the shipped class certificates (`certify_cli.SHIPPED_MODELS`) use them; no weights."""

from __future__ import annotations

LLAMA_3_2_3B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 3072,
    "intermediate_size": 8192, "num_hidden_layers": 28, "num_attention_heads": 24,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "tie_word_embeddings": True, "hidden_act": "silu",
}  # fmt: skip
QWEN2_5_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "vocab_size": 152064, "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-6, "rope_theta": 1000000.0, "sliding_window": 131072,
    "use_sliding_window": False, "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip
MISTRAL_NEMO_12B = {
    "architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 5120,
    "intermediate_size": 14336, "num_hidden_layers": 40, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 131072,
    "max_position_embeddings": 1024000, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
    "sliding_window": None, "tie_word_embeddings": False, "hidden_act": "silu",
}  # fmt: skip
QWEN3_4B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 2560,
    "intermediate_size": 9728, "num_hidden_layers": 36, "num_attention_heads": 32,
    "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
    "max_position_embeddings": 40960, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
    "tie_word_embeddings": True, "hidden_act": "silu", "attention_bias": False,
}  # fmt: skip
PUBLISHED = {"llama-3.2-3b": LLAMA_3_2_3B, "qwen2.5-7b": QWEN2_5_7B,
             "mistral-nemo-12b": MISTRAL_NEMO_12B, "qwen3-4b": QWEN3_4B}  # fmt: skip


def _dense(
    arch: str, hidden: int, inter: int, layers: int, heads: int, kv: int, vocab: int, **extra
) -> dict:
    """A config.json of a dense Llama / Qwen / Mistral-family checkpoint (head_dim 128)."""
    model_type = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2",
                  "Qwen3ForCausalLM": "qwen3", "MistralForCausalLM": "mistral"}[arch]  # fmt: skip
    return {"architectures": [arch], "model_type": model_type, "hidden_size": hidden,
            "intermediate_size": inter, "num_hidden_layers": layers,
            "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": 128,
            "vocab_size": vocab, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5,
            "rope_theta": 1000000.0, "tie_word_embeddings": False, "hidden_act": "silu",
            **extra}  # fmt: skip


# larger published shapes (numbers of their config.json files): past the shipped per-shape
# units (head counts 33-64, hidden 5120-8192), covered by the class certificates with their
# fused launches run op by op (`certified.gate.resolve`)
LARGER = {
    "qwen2.5-14b": _dense("Qwen2ForCausalLM", 5120, 13824, 48, 40, 8, 152064),
    "qwen2.5-32b": _dense("Qwen2ForCausalLM", 5120, 27648, 64, 40, 8, 152064),
    "qwen3-14b": _dense("Qwen3ForCausalLM", 5120, 17408, 40, 40, 8, 151936),
    "qwen3-32b": _dense("Qwen3ForCausalLM", 5120, 25600, 64, 64, 8, 151936),
    "llama-3.1-70b": _dense("LlamaForCausalLM", 8192, 28672, 80, 64, 8, 128256,
                            rope_theta=500000.0),
    "mistral-small-24b": _dense("MistralForCausalLM", 5120, 32768, 40, 32, 8, 131072),
}  # fmt: skip
# not covered by the shipped set: Qwen2.5-72B, `_dense("Qwen2ForCausalLM", 8192, 29568, 80,
# 64, 8, 152064)` (its down projection needs the row-parallel S = 2 K class, see
# `certify_cli.CLASS_ONLY_MODELS`)

# every published shape by name (`samebits certify --covers published:<name>`)
ALL_PUBLISHED = {**PUBLISHED, **LARGER}
