"""Model configuration, checkpoint loading (HF safetensors folder, GGUF) and tokenizer."""

from samebits.model.checkpoint import LoadedModel, WeightTarget, expected_weight_shapes
from samebits.model.config import ModelConfig, RopeScaling, YarnRopeScaling
from samebits.model.errors import ModelLoadError
from samebits.model.loader import default_model_path, is_random_spec, load_model, weights_target
from samebits.model.tokenizer import Tokenizer

__all__ = [
    "LoadedModel",
    "ModelConfig",
    "ModelLoadError",
    "RopeScaling",
    "Tokenizer",
    "WeightTarget",
    "YarnRopeScaling",
    "default_model_path",
    "expected_weight_shapes",
    "is_random_spec",
    "load_model",
    "weights_target",
]
