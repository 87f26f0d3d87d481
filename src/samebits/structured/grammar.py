"""From a `StructuredOutputsParams` to the grammar text the grammar engine (llguidance) runs.

`engine_grammar(spec)` is a pure function of the spec's normalized fields (and of the pinned
llguidance version): the same spec always gives the same grammar text, so a logged spec
rebuilds the same matcher in `samebits verify`.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from samebits.structured.params import StructuredOutputsParams

ANY_JSON_OBJECT = '{"type":"object"}'


def engine_grammar(spec: StructuredOutputsParams) -> str:
    """llguidance's grammar text for `spec`. ValueError when a schema or a GBNF grammar
    cannot be converted (other errors surface in `check_grammar`)."""
    from llguidance import LLMatcher, grammar_from

    kind = spec.kind
    if kind in ("json", "json_object"):
        schema = spec.json if kind == "json" else ANY_JSON_OBJECT
        return LLMatcher.grammar_from_json_schema(schema, defaults=_json_options(spec))
    if kind == "regex":
        return LLMatcher.grammar_from_regex(spec.regex)
    if kind == "choice":
        return LLMatcher.grammar_from_lark(choice_lark(spec.choice))
    return grammar_from("grammar", spec.grammar)  # Lark, or GBNF converted to Lark


def choice_lark(choices: tuple[str, ...]) -> str:
    """A Lark grammar whose language is exactly `choices` (each a quoted literal)."""
    alternatives = " | ".join(json.dumps(choice, ensure_ascii=False) for choice in choices)
    return f"start: {alternatives}\n"


def _json_options(spec: StructuredOutputsParams) -> dict[str, Any]:
    if spec.whitespace_pattern is not None:
        return {"whitespace_pattern": spec.whitespace_pattern}
    if spec.disable_any_whitespace:
        return {"whitespace_flexible": False}
    return {"whitespace_flexible": True}


def check_grammar(spec: StructuredOutputsParams) -> None:
    """ValueError naming the problem unless the grammar engine accepts `spec`'s grammar
    (checked without a tokenizer: schema keywords, regex and grammar syntax)."""
    from llguidance import LLMatcher

    try:
        grammar = engine_grammar(spec)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"structured_outputs.{spec.kind}: {exc}") from None
    is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar)
    if is_error:
        raise ValueError(f"structured_outputs.{spec.kind} is invalid: {_summary(messages)}")


def _summary(messages: list[str], limit: int = 300) -> str:
    """The engine's error on one line (whitespace runs folded), at most `limit` characters."""
    text = " ".join((messages[0] if messages else "").split())
    return (text or "rejected by the grammar engine")[:limit]
