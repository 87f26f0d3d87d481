"""Load a HF model folder: `config.json`, safetensors weights (single or sharded), tokenizer.

Files read: `config.json`; `model.safetensors.index.json` and its shards, or every
`*.safetensors`; `tokenizer.json`; optional `tokenizer_config.json` (chat template, bos/eos
token), `chat_template.jinja` (overrides the config's template) and `generation_config.json`
(`eos_token_id`, an int or a list). Weights of any float dtype come back as float32; bfloat16 /
float16 matrices also keep their stored values (`LoadedModel.quantized`) for the linear kernel.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import tokenizers
from safetensors import safe_open

from samebits.kernels.quantized import QuantizedTensor
from samebits.model.checkpoint import (
    LoadedModel,
    TensorEntry,
    WeightTarget,
    model_name_from_path,
    read_weights,
    read_weights_to,
)
from samebits.model.config import ModelConfig, model_config_from_hf
from samebits.model.errors import ModelLoadError
from samebits.model.gemma3_config import text_weight_name
from samebits.model.tokenizer import Tokenizer

INDEX_FILE = "model.safetensors.index.json"
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def load_hf_folder(
    folder: str | Path, progress: bool = False, target: WeightTarget | None = None
) -> LoadedModel:
    """Load config, weights and tokenizer of a HF folder; `ModelLoadError` on any bad file.
    With `target` the weights go straight to its device and dtype (see `read_weights_to`)."""
    folder = Path(folder).absolute()
    files: list[str] = []
    config = load_hf_config(folder, files)
    entries = safetensors_entries(folder, config, files)
    tokenizer = load_hf_tokenizer(folder, files)
    name = model_name_from_path(folder)
    if target is not None:
        weights, identity = read_weights_to(entries, config, folder, target, progress)
        return LoadedModel(config, weights, tokenizer, name, tuple(files), {}, identity)
    kept: dict[str, QuantizedTensor] = {}
    weights = read_weights(entries, config, folder, progress, kept)
    return LoadedModel(config, weights, tokenizer, name, tuple(files), kept)


def load_hf_config(folder: Path, files: list[str]) -> ModelConfig:
    """Parse `config.json` into a `ModelConfig` (appends the file to `files`)."""
    path = folder / "config.json"
    raw = _read_json(path, files)
    try:
        return model_config_from_hf(raw)
    except ValueError as exc:
        raise ModelLoadError(path, str(exc)) from None


def safetensors_entries(
    folder: Path, config: ModelConfig, files: list[str]
) -> dict[str, TensorEntry]:
    """`TensorEntry` per weight name, from the index's shards or every `*.safetensors`."""
    index = folder / INDEX_FILE
    if index.is_file():
        entries = _indexed_entries(folder, index, files)
    else:
        shards = sorted(folder.glob("*.safetensors"))
        if not shards:
            raise ModelLoadError(folder, "no *.safetensors weights found")
        entries: dict[str, TensorEntry] = {}
        for shard in shards:
            _add_shard(entries, shard, files, wanted=None)
    return _drop_ignored(entries, config)


def _indexed_entries(folder: Path, index: Path, files: list[str]) -> dict[str, TensorEntry]:
    weight_map = _read_json(index, files).get("weight_map")
    if not isinstance(weight_map, dict) or not weight_map:
        raise ModelLoadError(index, "'weight_map' is missing or empty")
    by_shard: dict[str, set[str]] = {}
    for name, shard in weight_map.items():
        by_shard.setdefault(str(shard), set()).add(name)
    entries: dict[str, TensorEntry] = {}
    for shard in sorted(by_shard):
        path = folder / shard
        if not path.is_file():
            raise ModelLoadError(path, f"shard listed in {INDEX_FILE} is missing")
        _add_shard(entries, path, files, wanted=by_shard[shard])
    return entries


def _add_shard(
    entries: dict[str, TensorEntry], path: Path, files: list[str], wanted: set[str] | None
) -> None:
    try:
        handle = safe_open(str(path), framework="pt")
        names = list(handle.keys())
        shapes = {name: tuple(handle.get_slice(name).get_shape()) for name in names}
    except Exception as exc:  # safetensors raises its own error types for corrupt files
        raise ModelLoadError(path, f"not a readable safetensors file ({exc})") from None
    files.append(str(path))
    missing = sorted((wanted or set()) - set(names))
    if missing:
        raise ModelLoadError(path, f"tensor {missing[0]!r} listed in {INDEX_FILE} is not here")
    for name in names:
        if wanted is not None and name not in wanted:
            continue
        if name in entries:
            raise ModelLoadError(path, f"tensor {name!r} also appears in {entries[name].file}")
        entries[name] = TensorEntry(shapes[name], str(path), _reader(handle, name, path))


def _reader(handle: Any, name: str, path: Path):
    def read():
        try:
            return handle.get_tensor(name)
        except Exception as exc:
            raise ModelLoadError(path, f"cannot read tensor {name!r} ({exc})") from None

    return read


def _drop_ignored(entries: dict[str, TensorEntry], config: ModelConfig) -> dict[str, TensorEntry]:
    """Drop buffers HF sometimes saves, and a duplicate `lm_head` of a tied model; a Gemma 3
    checkpoint keeps its text model's tensors, under the text model's names."""
    kept = {n: e for n, e in entries.items() if not n.endswith(_IGNORED_SUFFIXES)}
    if config.gemma3 is not None:
        kept = _text_part(kept)
    if config.tie_word_embeddings:
        kept.pop("lm_head.weight", None)
    return kept


def _text_part(entries: dict[str, TensorEntry]) -> dict[str, TensorEntry]:
    """A multimodal gemma3 checkpoint's language model (`language_model.` names mapped to the
    text model's, vision tower and projector dropped); a gemma3_text one unchanged."""
    out: dict[str, TensorEntry] = {}
    for name, entry in entries.items():
        text = text_weight_name(name)
        if text is None:
            continue
        if text in out:
            raise ModelLoadError(entry.file, f"tensor {name!r} duplicates {text!r}")
        out[text] = entry
    return out


def load_hf_tokenizer(folder: Path, files: list[str]) -> Tokenizer:
    """`tokenizer.json` plus chat template, bos and eos ids from the optional config files.

    eos ids: generation_config's `eos_token_id` (int or list), then tokenizer_config's
    `eos_token`, deduplicated in that order.
    """
    backend = _read_backend(folder / "tokenizer.json", files)
    tok_config = _read_optional_json(folder / "tokenizer_config.json", files)
    template, template_file = _chat_template(folder, tok_config, files)
    gen_config = _read_optional_json(folder / "generation_config.json", files)
    bos_token = _token_content(tok_config.get("bos_token"))
    eos_token = _token_content(tok_config.get("eos_token"))
    eos_ids = _generation_ids(
        folder / "generation_config.json", gen_config, "eos_token_id", backend
    )
    bos_ids = _generation_ids(
        folder / "generation_config.json", gen_config, "bos_token_id", backend
    )
    if eos_token is not None:
        eos_ids.append(_token_id(backend, eos_token, folder / "tokenizer_config.json"))
    if bos_token is not None:
        bos_ids = [_token_id(backend, bos_token, folder / "tokenizer_config.json")]
    try:
        return Tokenizer(
            backend,
            chat_template=template,
            eos_token_ids=eos_ids,
            bos_token_id=bos_ids[0] if bos_ids else None,
            bos_token=bos_token,
            eos_token=eos_token,
        )
    except ValueError as exc:  # only the chat template can still be wrong here
        raise ModelLoadError(template_file, str(exc)) from None


def _read_backend(path: Path, files: list[str]) -> tokenizers.Tokenizer:
    if not path.is_file():
        raise ModelLoadError(path, "missing (a fast-tokenizer tokenizer.json is required)")
    try:
        backend = tokenizers.Tokenizer.from_file(str(path))
    except Exception as exc:
        raise ModelLoadError(path, f"cannot parse tokenizer ({exc})") from None
    files.append(str(path))
    return backend


def _chat_template(folder: Path, tok_config: dict, files: list[str]) -> tuple[str | None, Path]:
    """The template source and the file it came from (chat_template.jinja wins)."""
    jinja_path = folder / "chat_template.jinja"
    if jinja_path.is_file():
        files.append(str(jinja_path))
        return jinja_path.read_text(encoding="utf-8"), jinja_path
    config_path = folder / "tokenizer_config.json"
    template = tok_config.get("chat_template")
    if isinstance(template, list):  # [{"name": "default", "template": "..."}, ...]
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if template is not None and not isinstance(template, str):
        raise ModelLoadError(config_path, "chat_template must be a string")
    return template, config_path


def _generation_ids(
    path: Path, gen_config: dict, key: str, backend: tokenizers.Tokenizer
) -> list[int]:
    """`gen_config[key]` as a list of ids known to the tokenizer (an int or a list in the file)."""
    value = gen_config.get(key)
    if value is None:
        return []
    values = value if isinstance(value, list) else [value]
    vocab_size = backend.get_vocab_size(with_added_tokens=True)
    for item in values:
        if not isinstance(item, int) or isinstance(item, bool) or not 0 <= item < vocab_size:
            raise ModelLoadError(
                path, f"{key} must be token ids in [0, {vocab_size}), got {value!r}"
            )
    return list(values)


def _token_content(token: object) -> str | None:
    """A special token given as a string or as an AddedToken dict (`{"content": ...}`)."""
    if isinstance(token, dict):
        token = token.get("content")
    return token if isinstance(token, str) else None


def _token_id(backend: tokenizers.Tokenizer, token: str, path: Path) -> int:
    token_id = backend.token_to_id(token)
    if token_id is None:
        raise ModelLoadError(path, f"special token {token!r} is not in the vocabulary")
    return token_id


def _read_json(path: Path, files: list[str]) -> dict:
    if not path.is_file():
        raise ModelLoadError(path, "file is missing")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelLoadError(path, f"cannot read JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ModelLoadError(path, "expected a JSON object")
    files.append(str(path))
    return data


def _read_optional_json(path: Path, files: list[str]) -> dict:
    return _read_json(path, files) if path.is_file() else {}
