"""Tool-call parsers by name (vLLM's `--tool-call-parser` names) and the default of each
model family (`model_type`)."""

from __future__ import annotations

from samebits.tools.parsers.base import ToolParser
from samebits.tools.parsers.hermes import HermesParser
from samebits.tools.parsers.llama3 import Llama3JsonParser
from samebits.tools.parsers.mistral import MistralParser

PARSERS: dict[str, type[ToolParser]] = {
    "hermes": HermesParser,
    "llama3_json": Llama3JsonParser,
    "mistral": MistralParser,
}
FAMILY_DEFAULTS = {
    "qwen2": "hermes", "qwen3": "hermes", "qwen3_moe": "hermes",
    "llama": "llama3_json", "mistral": "mistral", "mixtral": "mistral",
}  # fmt: skip


def get_parser(name: str) -> ToolParser:
    """The parser called `name`; ValueError listing the known names otherwise."""
    if name not in PARSERS:
        raise ValueError(f"unknown tool-call parser {name!r}; known: {', '.join(PARSERS)}")
    return PARSERS[name]()


def default_parser_name(model_type: str | None) -> str | None:
    """The parser of a model family (None: the family has no default; pass one)."""
    return FAMILY_DEFAULTS.get(model_type or "")


__all__ = ["PARSERS", "ToolParser", "default_parser_name", "get_parser"]
