"""A logged tool request's grammar against its logged tools.

A request whose `tool_choice` forced calls (required / a named function) ran under the
grammar `samebits.tools.grammar.call_grammar` builds from its tools, choice, parallel flag
and parser (the marker ids from the deployment's tokenizer). The entry logs both the tools
(field `tools`) and the grammar (`sampling_params.structured_outputs`); the replay checks
the grammar, this checks that it is the one the logged tools give, so an entry cannot claim
tools other than those enforced.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from samebits.tools.grammar import call_grammar, special_tag_ids
from samebits.tools.parsers import get_parser
from samebits.tools.spec import parse_tool_choice, parse_tools


def tools_problem(entry: Mapping[str, Any], tokenizer: Any) -> str | None:
    """None when `entry` has no `tools` or its forced grammar matches them; else why not."""
    fields = entry.get("tools")
    if fields is None:
        return None
    try:
        return _check(fields, entry, tokenizer)
    except (KeyError, TypeError, ValueError) as exc:
        return f"the logged tools are unusable: {type(exc).__name__}: {exc}"


def _check(fields: Mapping[str, Any], entry: Mapping[str, Any], tokenizer: Any) -> str | None:
    tools = parse_tools(json.loads(fields["tools"]))
    choice = parse_tool_choice(fields["tool_choice"], tools)
    if not choice.forced:
        return None  # nothing was enforced by the tools (auto / none)
    parser = get_parser(fields["tool_call_parser"])
    tags = special_tag_ids(tokenizer, parser.markers)
    expected = call_grammar(parser, tools, choice, bool(fields["parallel_tool_calls"]), tags)
    logged = (entry["sampling_params"].get("structured_outputs") or {}).get("grammar")
    if logged != expected:
        return "the logged grammar is not the one the logged tools and tool_choice give"
    return None
