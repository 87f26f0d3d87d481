"""Turning a raw HTTP body into a validated request model, or an APIError naming the problem.

Order of checks: size (HTTP 413 beyond `max_body_bytes`, judged on Content-Length and on the
bytes actually read), UTF-8, JSON syntax (NaN/Infinity rejected), then the pydantic model
(types, ranges), then unpaired surrogates in strings (not encodable as UTF-8), then the
parameters this server refuses (`protocol.REFUSED`) and combinations it cannot honour.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from samebits.server.errors import APIError, bad_request
from samebits.server.protocol import refusals

ModelT = TypeVar("ModelT", bound=BaseModel)


async def read_body(request: Request, max_body_bytes: int) -> bytes:
    """The body, or APIError(413) as soon as it exceeds `max_body_bytes`."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > max_body_bytes:
        raise _too_large(max_body_bytes)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > max_body_bytes:
            raise _too_large(max_body_bytes)
        chunks.append(chunk)
    return b"".join(chunks)


def parse_json_body(body: bytes) -> Any:
    """Decode strict UTF-8 and parse JSON."""
    if not body.strip():
        raise bad_request("request body is empty; expected a JSON object")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise bad_request(f"request body is not valid UTF-8 (byte offset {exc.start})") from exc
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        raise bad_request(f"request body is not valid JSON: {exc}") from exc


def validate_model(model: type[ModelT], data: Any) -> ModelT:
    """`model` validated from parsed JSON; the first problem becomes a 400 naming its field."""
    if not isinstance(data, dict):
        raise bad_request(f"request body must be a JSON object, got {type(data).__name__}")
    try:
        parsed = model.model_validate(data)
    except ValidationError as exc:
        raise _validation_error(exc) from exc
    _reject_surrogates(data)
    kind = getattr(model, "kind", None)
    refused = refusals(data, kind) if kind else []
    for param, reason in refused + getattr(parsed, "unsupported", list)():
        raise bad_request(reason, param)
    return parsed


UNION_HINTS = {
    "prompt": "a string, a list of strings, a list of token ids or a list of token id lists",
    "stop": "a string or a list of strings",
}


def _validation_error(exc: ValidationError) -> APIError:
    first = _most_specific(exc.errors(include_url=False))
    loc = ".".join(str(part) for part in first["loc"] if not _is_union_tag(part))
    field = loc or "body"
    if first["type"] == "missing":
        return bad_request(f"'{field}' is required", field)
    value = first.get("input")
    shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
    message = f"invalid value for '{field}': {first['msg']} (got {shown[:80]})"
    hint = UNION_HINTS.get(field.split(".")[0])
    if hint and first["type"].endswith("_type"):
        message += f"; expected {hint}"
    return bad_request(message, field)


def _most_specific(errors: list[dict[str, Any]]) -> dict[str, Any]:
    """Of a union's failed alternatives, the deepest error, preferring a violated constraint
    (e.g. a negative token id) over a type mismatch."""

    def rank(error: dict[str, Any]) -> tuple[int, bool]:
        depth = sum(1 for part in error["loc"] if not _is_union_tag(part))
        return depth, not error["type"].endswith("_type")

    return max(errors, key=rank)


def _is_union_tag(part: Any) -> bool:
    """pydantic puts the union member tried (e.g. 'str', 'list[int]') into the error loc."""
    return isinstance(part, str) and ("[" in part or part in ("str", "int", "float", "bool"))


def _reject_surrogates(value: Any, path: str = "") -> None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            field = path or "body"
            raise bad_request(
                f"'{field}' contains an unpaired surrogate (invalid UTF-16)", field
            ) from exc
    elif isinstance(value, dict):
        for key, item in value.items():
            _reject_surrogates(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _reject_surrogates(item, f"{path}.{i}")


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not valid JSON")


def _too_large(limit: int) -> APIError:
    return APIError(
        413, f"request body is larger than the limit of {limit} bytes", None, "too_large"
    )
