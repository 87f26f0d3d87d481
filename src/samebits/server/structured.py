"""Structured outputs of an API request: OpenAI's `response_format`, vLLM's `guided_*` extras
and its `structured_outputs` object, turned into one `StructuredOutputsParams`.

At most one source may be set (`response_format` of type "text" counts as none); anything
the grammar engine rejects is a 400 naming the field it came from, before any engine work.
"""

from __future__ import annotations

from typing import Any

from samebits.server.errors import bad_request
from samebits.structured import StructuredOutputsParams

GUIDED = {"guided_json": "json", "guided_regex": "regex", "guided_choice": "choice",
          "guided_grammar": "grammar"}  # fmt: skip
BACKENDS = ("auto", "guidance", "llguidance")
RESPONSE_FORMATS = ("text", "json_object", "json_schema")


def structured_outputs(req: Any) -> StructuredOutputsParams | None:
    """The request's constraint (None: free text); a 400 for a conflict or a bad grammar.
    `guided_whitespace_pattern` applies to the JSON sources; `guided_decoding_backend` may
    only name llguidance ("auto", "guidance", "llguidance")."""
    _check_backend(req.guided_decoding_backend)
    sources = _sources(req)
    if not sources:
        return None
    if len(sources) > 1:
        names = ", ".join(name for name, _ in sources)
        raise bad_request(
            f"only one structured-outputs source may be set, got {names}", sources[1][0]
        )
    param, fields = sources[0]
    if req.guided_whitespace_pattern is not None and ({"json", "json_object"} & set(fields)):
        fields = {**fields, "whitespace_pattern": req.guided_whitespace_pattern}
    try:
        return StructuredOutputsParams.from_dict(fields)
    except (ValueError, TypeError) as exc:
        message = str(exc) if str(exc).startswith(param) else f"{param}: {exc}"
        raise bad_request(message, param) from exc


def _sources(req: Any) -> list[tuple[str, dict[str, Any]]]:
    out = []
    fmt = response_format_fields(req.response_format)
    if fmt is not None:
        out.append(("response_format", fmt))
    for name, key in GUIDED.items():
        if getattr(req, name) is not None:
            out.append((name, {key: getattr(req, name)}))
    if req.structured_outputs is not None:
        out.append(("structured_outputs", dict(req.structured_outputs)))
    return out


def response_format_fields(fmt: dict[str, Any] | None) -> dict[str, Any] | None:
    """`StructuredOutputsParams` fields of an OpenAI `response_format` (None: free text).
    `json_schema.strict` may be anything: the schema is always enforced."""
    if fmt is None or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"json_object": True}
    if fmt.get("type") != "json_schema":
        raise bad_request(
            f"response_format type must be one of {', '.join(RESPONSE_FORMATS)}, got "
            f"{fmt.get('type')!r:.40}",
            "response_format",
        )
    spec = fmt.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise bad_request(
            "response_format json_schema needs 'json_schema': {'name': ..., 'schema': {...}}",
            "response_format",
        )
    return {"json": spec["schema"]}


def _check_backend(backend: str | None) -> None:
    if backend is not None and backend not in BACKENDS:
        raise bad_request(
            f"guided_decoding_backend {backend!r:.40} is not available; the grammar engine is "
            "llguidance ('auto', 'guidance' or 'llguidance')",
            "guided_decoding_backend",
        )
