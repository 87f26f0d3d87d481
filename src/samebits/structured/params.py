"""`StructuredOutputsParams`: what a request's output must match (vLLM >= 0.10's name).

One of `json` (a JSON schema), `json_object` (any JSON object), `regex`, `choice` (one of a
list of strings) or `grammar` (a Lark or GBNF context-free grammar, llguidance's dialect) is
set. Values are normalized on construction, so two specs that constrain the same way in the
same words compare equal, hash equal and serialize to the same dict: a schema (given as a
dict or as JSON text) is stored as compact JSON text with its key order kept (the order of
`properties` is the order the object is generated in), choices as a tuple.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

SOURCES = ("json", "json_object", "regex", "choice", "grammar")
OPTIONS = ("disable_any_whitespace", "whitespace_pattern")


@dataclass(frozen=True)
class StructuredOutputsParams:
    """The constraint on one request's output. Invariants after `__post_init__`: exactly one
    of `SOURCES` is set; `json` is compact JSON text of an object or a boolean schema;
    `json_object` is True or None; `choice` a non-empty tuple of strings; `regex` / `grammar`
    non-empty strings; the grammar engine accepted the grammar (ValueError otherwise, with its
    message). `disable_any_whitespace` (JSON only) allows no whitespace between JSON tokens;
    `whitespace_pattern` (JSON only) is the regex whitespace between JSON tokens must match;
    neither set: any JSON whitespace (vLLM's default)."""

    json: str | dict | None = None
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    disable_any_whitespace: bool = False
    whitespace_pattern: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "json", _normalize_schema(self.json))
        object.__setattr__(self, "choice", _normalize_choice(self.choice))
        if self.json_object is False:
            object.__setattr__(self, "json_object", None)
        _check_types(self)
        given = [name for name in SOURCES if getattr(self, name) is not None]
        if len(given) != 1:
            raise ValueError(
                f"StructuredOutputsParams needs exactly one of {', '.join(SOURCES)}; got "
                f"{given or 'none'}"
            )
        from samebits.structured.grammar import check_grammar

        check_grammar(self)

    @property
    def kind(self) -> str:
        """The name of the one source that is set ("json", "regex", ...)."""
        return next(name for name in SOURCES if getattr(self, name) is not None)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe: the set source and the non-default options;
        `StructuredOutputsParams.from_dict(s.to_dict()) == s`."""
        out: dict[str, Any] = {}
        for field in fields(self):
            value = getattr(self, field.name)
            if value is not None and value is not False:
                out[field.name] = list(value) if isinstance(value, tuple) else value
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StructuredOutputsParams:
        """Inverse of `to_dict`; unknown keys raise ValueError (they might constrain)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"structured_outputs must be a mapping, got {type(data).__name__}")
        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise ValueError(f"structured_outputs: unknown field(s) {unknown}")
        return cls(**dict(data))


def _normalize_schema(schema: object) -> str | None:
    if schema is None:
        return None
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as exc:
            raise ValueError(f"structured_outputs.json is not valid JSON: {exc}") from None
    if not isinstance(schema, dict | bool):
        raise ValueError(
            f"structured_outputs.json must be a JSON schema (an object), got {type(schema).__name__}"
        )
    return json.dumps(schema, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _normalize_choice(choice: object) -> tuple[str, ...] | None:
    if choice is None:
        return None
    if not isinstance(choice, list | tuple) or not choice:
        raise ValueError(f"structured_outputs.choice must be a non-empty list, got {choice!r:.80}")
    if not all(isinstance(item, str) for item in choice):
        raise ValueError("structured_outputs.choice must hold strings only")
    return tuple(choice)


def _check_types(spec: StructuredOutputsParams) -> None:
    for name in ("regex", "grammar"):
        value = getattr(spec, name)
        if value is not None and (not isinstance(value, str) or not value):
            raise ValueError(f"structured_outputs.{name} must be a non-empty string")
    pattern = spec.whitespace_pattern
    if pattern is not None and not isinstance(pattern, str):
        raise ValueError("structured_outputs.whitespace_pattern must be a string (a regex)")
    if spec.json_object not in (None, True):
        raise ValueError(f"structured_outputs.json_object must be a bool, got {spec.json_object!r}")
    if not isinstance(spec.disable_any_whitespace, bool):
        raise ValueError("structured_outputs.disable_any_whitespace must be a bool")
