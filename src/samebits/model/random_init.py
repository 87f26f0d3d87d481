"""Random-weight models of real architectures' shapes, built in memory (no download).

For tests and benchmarks where real weights cannot be fetched: `random_model("llama-3-8b",
device="cuda", dtype=torch.bfloat16)` gives a `LoadedModel` with every tensor of
`expected_weight_shapes(config)`, drawn tensor by tensor on the target device (an 8B model in
bfloat16 goes straight to the GPU; the largest transient is one float32 tensor).

Weight distribution (chosen so activations stay O(1) at any depth; pre-norm residual stream):

- q/k/v, gate/up projections (MoE experts' too: gate_proj / up_proj, mixtral's w1 / w3) and a
  MoE router (`gate.weight`): N(0, 1 / fan_in), so a unit-RMS normed input gives
  unit-variance outputs (router logits ~N(0, 1): tokens spread over the experts).
- o_proj, down_proj, mixtral's w2 (the residual writers): N(0, 1 / (fan_in * 2 * num_layers)) (GPT-2 style
  depth scaling), so the 2 * num_layers residual additions sum to variance ~1 at the end.
  `num_layers` here is the preset's full depth, also when `random_model(num_layers=...)` cuts
  the model short (so a short model is a prefix of the full one).
- embed_tokens (and lm_head): N(0, 1 / hidden_size): logits of a unit-RMS final hidden state are
  ~N(0, 1). The EOS row is scaled by `EOS_ROW_SCALE`, so the EOS logit sits near 0 while the
  maximum over the vocabulary is ~3-5: greedy or sampled random generation rarely stops on EOS.
- RMSNorm weights (input/post-attention/final/q/k norms): 1 + N(0, 0.02^2).
- q/k/v biases (qwen2): N(0, 0.02^2).

Determinism: each tensor has its own `torch.Generator` seeded from SHA-256(seed, name), so a
tensor's values depend only on (seed, name, shape, device type) and not on the other tensors:
`num_layers=2` gives exactly the first two layers of the full-depth model. Values are drawn in
float32 on the device, then rounded to `dtype` (so a bfloat16 model is the float32 model of the
same seed and device rounded). CPU and CUDA generators differ: the same seed gives different
weights on "cpu" and "cuda" (and CUDA's may differ between GPU models, since torch sizes the
generator's grid from the multiprocessor count). The `LoadedModel`'s `weights_identity` is the SHA-256 of that
recipe (`weights_recipe`), so the deployment fingerprint needs no pass over the bytes.

The tokenizer (`random_tokenizer`) is byte-level BPE with exactly `vocab_size` ids: the 256
byte symbols (any text encodes, `decode(encode(text)) == text`), filler tokens ` t<id>`
(readable when random generation picks them) and three specials at the end, ChatML style.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math

import torch

from samebits.model.checkpoint import LoadedModel, expected_weight_shapes
from samebits.model.config import ModelConfig
from samebits.model.presets import PRESETS
from samebits.model.tokenizer import Tokenizer, byte_level_bpe

LINEAR_GAIN = 1.0
NORM_NOISE = 0.02
BIAS_STD = 0.02
EOS_ROW_SCALE = 0.1
RECIPE_VERSION = "samebits.model.random_init/1"  # bump when the drawn values change
# the projections that write the residual stream (mixtral's expert down projection is "w2")
RESIDUAL_WRITERS = ("o_proj.weight", "down_proj.weight", ".w2.weight")

BOS_TOKEN = "<|bos|>"
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
SPECIAL_TOKENS = (BOS_TOKEN, IM_START, EOS_TOKEN)
NUM_BYTE_TOKENS = 256
MIN_VOCAB = NUM_BYTE_TOKENS + len(SPECIAL_TOKENS)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def random_model(
    preset_or_config: str | ModelConfig,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    num_layers: int | None = None,
) -> LoadedModel:
    """A `LoadedModel` with random weights of a preset's (or a config's) shapes.

    `num_layers` overrides the layer count (partial-depth runs; the first layers equal the
    full model's). Every tensor is created on `device` in `dtype` (see the module docstring for
    the distribution and what the values depend on). The name is `random:<preset>:seed<seed>`
    (`<preset>` is `custom` for a config). Raises `KeyError` for an unknown preset name and
    `ValueError` for a vocabulary smaller than `MIN_VOCAB`.
    """
    preset, config = _resolve(preset_or_config)
    depth = config.num_hidden_layers  # the full depth scales o/down, also for num_layers
    if num_layers is not None:
        config = dataclasses.replace(config, num_hidden_layers=num_layers)
    tokenizer = random_tokenizer(config.vocab_size)
    eos = tokenizer.eos_token_ids[0]
    device = torch.device(device)
    weights = {}
    for name, shape in expected_weight_shapes(config).items():
        std = weight_std(name, shape, config, depth)
        weights[name] = _random_tensor(name, shape, std, seed, device, dtype, eos)
    identity = weights_identity(config, depth, seed, device, dtype)
    name = f"random:{preset}:seed{seed}"
    return LoadedModel(config, weights, tokenizer, name, (), weights_identity=identity)


def weights_recipe(
    config: ModelConfig, depth: int, seed: int, device: torch.device, dtype: torch.dtype
) -> str:
    """Everything the generated values depend on, as canonical JSON (see `weights_identity`)."""
    recipe = {
        "generator": RECIPE_VERSION,
        "config": config.to_dict(),
        "depth_for_scaling": depth,
        "seed": int(seed),
        "device_type": torch.device(device).type,
        "generator_device": _generator_device(torch.device(device)),
        "dtype": str(dtype),
        "torch": torch.__version__,
        "constants": [LINEAR_GAIN, NORM_NOISE, BIAS_STD, EOS_ROW_SCALE],
    }
    return json.dumps(recipe, sort_keys=True, separators=(",", ":"))


def weights_identity(
    config: ModelConfig, depth: int, seed: int, device: torch.device, dtype: torch.dtype
) -> str:
    """Hex SHA-256 of `weights_recipe`: names the weights in the deployment fingerprint in place
    of a digest of their bytes (which would need a device-to-host copy of every tensor)."""
    return hashlib.sha256(weights_recipe(config, depth, seed, device, dtype).encode()).hexdigest()


def _generator_device(device: torch.device) -> str:
    """What CUDA's random streams depend on beyond the seed: torch sizes the generator's grid
    from the multiprocessor count, so another GPU model may draw other values."""
    if device.type != "cuda":
        return device.type
    props = torch.cuda.get_device_properties(device)
    return f"{props.name}, {props.multi_processor_count} SMs"


def _resolve(preset_or_config: str | ModelConfig) -> tuple[str, ModelConfig]:
    if isinstance(preset_or_config, ModelConfig):
        return "custom", preset_or_config
    if preset_or_config not in PRESETS:
        raise KeyError(f"unknown preset {preset_or_config!r} (presets: {sorted(PRESETS)})")
    return preset_or_config, PRESETS[preset_or_config]


def weight_std(
    name: str, shape: tuple[int, ...], config: ModelConfig, depth: int | None = None
) -> float:
    """Standard deviation of the random values of weight `name` (norms: of the noise).
    `depth` (default `config.num_hidden_layers`) is the layer count o/down are scaled for."""
    depth = depth or config.num_hidden_layers
    if name.endswith("norm.weight"):
        return NORM_NOISE
    if name.endswith(".bias"):
        return BIAS_STD
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        return 1.0 / math.sqrt(config.hidden_size)
    fan_in = shape[1]
    if name.endswith(RESIDUAL_WRITERS):
        return LINEAR_GAIN / math.sqrt(fan_in * 2 * depth)
    return LINEAR_GAIN / math.sqrt(fan_in)


def tensor_seed(seed: int, name: str) -> int:
    """The generator seed of one tensor: 63 bits of SHA-256(seed, name)."""
    digest = hashlib.sha256(f"{int(seed)}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _random_tensor(
    name: str,
    shape: tuple[int, ...],
    std: float,
    seed: int,
    device: torch.device,
    dtype: torch.dtype,
    eos: int,
) -> torch.Tensor:
    generator = torch.Generator(device=device).manual_seed(tensor_seed(seed, name))
    values = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
    values.mul_(std)
    if name.endswith("norm.weight"):
        values.add_(1.0)
    if name in ("model.embed_tokens.weight", "lm_head.weight"):
        values[eos].mul_(EOS_ROW_SCALE)
    return values.to(dtype).contiguous()


def random_tokenizer(vocab_size: int) -> Tokenizer:
    """A byte-level BPE `Tokenizer` with exactly `vocab_size` ids.

    Ids 0-255: the byte symbols (every text encodes; `decode(encode(text)) == text`); ids
    256..vocab_size-4: filler tokens that decode to ` t<id>` (never produced by `encode`); the
    last three: `<|bos|>` (BOS, prepended by `add_special_tokens=True`), `<|im_start|>` and
    `<|im_end|>` (EOS), used by a minimal ChatML chat template.
    Raises `ValueError` when `vocab_size < MIN_VOCAB`.
    """
    if vocab_size < MIN_VOCAB:
        raise ValueError(f"vocab_size must be at least {MIN_VOCAB}, got {vocab_size}")
    alphabet = sorted(_byte_alphabet(), key=_byte_order())
    first_special = vocab_size - len(SPECIAL_TOKENS)
    fillers = [f"\u0120t{i}" for i in range(NUM_BYTE_TOKENS, first_special)]  # "Ġ" is a space
    tokens = [*alphabet, *fillers, *SPECIAL_TOKENS]
    special_ids = list(range(first_special, vocab_size))
    backend = byte_level_bpe(
        tokens, [], pre_tokenizer="gpt2", special_ids=special_ids, bos_id=first_special
    )
    return Tokenizer(
        backend,
        chat_template=CHAT_TEMPLATE,
        eos_token_ids=(vocab_size - 1,),
        bos_token_id=first_special,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
    )


def _byte_alphabet() -> list[str]:
    from tokenizers import pre_tokenizers

    return pre_tokenizers.ByteLevel.alphabet()


def _byte_order():
    """Sort key putting each byte-level symbol at its byte value (id b decodes to byte b)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {chr(b): b for b in printable}
    shift = 0
    for byte in range(256):
        if byte not in printable:
            table[chr(256 + shift)] = byte
            shift += 1
    return table.__getitem__
