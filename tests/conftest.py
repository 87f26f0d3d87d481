"""Shared session fixtures: tiny random HF checkpoints and the embedded SmolLM2 GGUF.

Heavy imports (torch, transformers) happen inside the fixtures, so collecting tests that do
not use them stays fast.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

# Without an NVIDIA GPU, Triton can only interpret. Choose that before any test module imports
# triton: `triton.language`'s own @jit helpers (tl.max, tl.sum, ...) are built in the mode
# that is active when triton is first imported, and an interpreted kernel cannot call a
# compiled one (seen when a module collected early imported the kernels).
if shutil.which("nvidia-smi") is None:
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _tiny(tmp_path_factory: pytest.TempPathFactory, arch: str) -> Path:
    from tiny_models import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp(f"tiny_{arch}"), arch)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random LlamaForCausalLM folder (llama3 RoPE scaling)."""
    return _tiny(tmp_path_factory, "llama")


@pytest.fixture(scope="session")
def tiny_qwen2_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random Qwen2ForCausalLM folder (qkv bias; eos ids as a list)."""
    return _tiny(tmp_path_factory, "qwen2")


@pytest.fixture(scope="session")
def tiny_qwen3_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random Qwen3ForCausalLM folder (q/k norm)."""
    return _tiny(tmp_path_factory, "qwen3")


@pytest.fixture(scope="session")
def tiny_mistral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random MistralForCausalLM folder (chat template in chat_template.jinja)."""
    return _tiny(tmp_path_factory, "mistral")


@pytest.fixture(scope="session")
def tiny_qwen3_moe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random Qwen3MoeForCausalLM folder (8 experts, top 3, renormalized; all sparse)."""
    return _tiny(tmp_path_factory, "qwen3_moe")


@pytest.fixture(scope="session")
def tiny_qwen3_moe_mixed_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random Qwen3MoeForCausalLM folder with dense layers (4 layers, layer 1 sparse:
    decoder_sparse_step 2, mlp_only_layers [3]; 6 experts, top 2, not renormalized)."""
    return _tiny(tmp_path_factory, "qwen3_moe_mixed")


@pytest.fixture(scope="session")
def tiny_mixtral_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random MixtralForCausalLM folder (8 experts, top 2, w1 / w3 / w2 names)."""
    return _tiny(tmp_path_factory, "mixtral")


@pytest.fixture(scope="session")
def tiny_gemma3_text_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Tiny random Gemma3ForCausalLM folder (4 layers, sliding window 40 on layers 0, 2, 3,
    linear RoPE scaling on the global layer 1, tied embeddings, 1024 positions)."""
    return _tiny(tmp_path_factory, "gemma3_text")


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """Path of the embedded default model, SmolLM2-135M-Instruct.Q4_1.gguf."""
    from samebits.model.loader import default_model_path

    return default_model_path()


@pytest.fixture(scope="session")
def smollm2_model():
    """The default model, `load_model()` with no path, loaded once per session (a
    `LoadedModel`; treat as read-only)."""
    from samebits.model.loader import load_model

    return load_model()


@pytest.fixture(scope="session")
def hf_smollm2_tokenizer(smollm2_gguf: Path):
    """transformers' own tokenizer built from the same GGUF (the reference for token ids)."""
    import transformers

    return transformers.AutoTokenizer.from_pretrained(
        smollm2_gguf.parent, gguf_file=smollm2_gguf.name
    )
