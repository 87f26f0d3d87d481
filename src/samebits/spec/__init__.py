"""The executable specification: the determinism predicates and the reference semantics."""

from samebits.spec.definition import (
    OutputRecord,
    RequestInput,
    RequestView,
    deterministic,
    first_disagreement,
    first_mismatch,
    is_reference_prefix,
    request_input,
    view_from_output,
    views_agree,
)
from samebits.spec.reference import reference_view

__all__ = [
    "OutputRecord",
    "RequestInput",
    "RequestView",
    "deterministic",
    "first_disagreement",
    "first_mismatch",
    "is_reference_prefix",
    "reference_view",
    "request_input",
    "view_from_output",
    "views_agree",
]
