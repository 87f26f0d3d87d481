"""A chat request's tool calling, resolved once per call: its `ToolPlan`.

The plan holds the checked tools and tool choice, the server's parser (`--tool-call-parser`,
else the model family's default) and, for `required` or a named function, the grammar that
forces the parser's wire format (`StructuredOutputsParams.grammar`, so the audit log records
it and `samebits verify` replays it). Each tool's schema is compiled into a grammar even when
nothing is forced, so a bad schema is a 400 naming `tools` in every mode.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from samebits.server.errors import bad_request
from samebits.structured import StructuredOutputsParams
from samebits.tools.calls import ParsedOutput
from samebits.tools.grammar import call_grammar, special_tag_ids
from samebits.tools.parsers import PARSERS, ToolParser, default_parser_name, get_parser
from samebits.tools.spec import Tool, ToolChoice, ToolSpecError, parse_tool_choice, parse_tools
from samebits.tools.stream import ToolCallStream


@dataclass(frozen=True)
class ToolPlan:
    """Invariants: `parser` is None iff the mode is "none"; `grammar` is set iff the choice
    is forced (required / named)."""

    tools: tuple[Tool, ...]
    choice: ToolChoice
    parallel: bool
    parser: ToolParser | None
    grammar: StructuredOutputsParams | None

    @property
    def max_calls(self) -> int | None:
        """1 under `parallel_tool_calls: false`: a grammar allows one call; under `auto` the
        calls after the first are dropped (vLLM's `maybe_filter_parallel_tool_calls`)."""
        return None if self.parallel else 1

    def parse(self, text: str) -> ParsedOutput:
        """The whole output's content and calls (at most `max_calls`)."""
        assert self.parser is not None, "tool_choice none has no parser"
        parsed = self.parser.parse(text)
        return ParsedOutput(parsed.content, parsed.calls[: self.max_calls])

    def stream(self) -> ToolCallStream:
        """A stream of this plan's calls: its pieces join to `parse` of the whole output."""
        assert self.parser is not None, "tool_choice none has no parser"
        return ToolCallStream(self.parser, self.max_calls)

    @property
    def keeps_special_tokens(self) -> bool:
        """Whether outputs must be decoded with special tokens (the parser's marker is one)."""
        return self.parser is not None and self.parser.needs_special_tokens

    def audit_fields(self) -> dict[str, Any]:
        """What the audit entry records: the tools (as JSON text: the log's canonical JSON
        sorts object keys, and a schema's property order is the order arguments are
        generated in), the choice, the parser."""
        tools = [t.to_openai() for t in self.tools]
        return {
            "tools": json.dumps(tools, ensure_ascii=False, separators=(",", ":")),
            "tool_choice": self.choice.to_openai(),
            "parallel_tool_calls": self.parallel,
            "tool_call_parser": None if self.parser is None else self.parser.name,
        }


def served_parser_name(flag: str | None, engine: Any) -> str | None:
    """The parser the server uses: `--tool-call-parser`, else the model family's default
    (None: tool calls are refused, except `tool_choice` "none")."""
    return flag or default_parser_name(model_type(engine))


def model_type(engine: Any) -> str | None:
    """The served model's family (`model_type`), None when the engine does not say."""
    loaded = getattr(getattr(engine, "deployment", None), "loaded", None)
    return getattr(getattr(loaded, "config", None), "model_type", None)


def tool_plan(req: Any, tokenizer: Any, parser_name: str | None) -> ToolPlan | None:
    """The request's plan; None when it has neither tools nor a tool choice."""
    if not req.tools and req.tool_choice is None:
        return None
    try:
        tools = parse_tools(req.tools)
        choice = parse_tool_choice(req.tool_choice, tools)
    except ToolSpecError as exc:
        raise bad_request(str(exc), exc.param) from exc
    if not tools:
        return None  # tool_choice "none" / "auto" without tools: plain text
    parser = _parser(choice, parser_name)
    grammar = _grammar(tools, choice, req.parallel_tool_calls, parser, tokenizer)
    return ToolPlan(tools, choice, req.parallel_tool_calls, parser, grammar)


def _parser(choice: ToolChoice, name: str | None) -> ToolParser | None:
    if choice.mode == "none":
        return None
    if name is None:
        raise bad_request(
            f"tool_choice {choice.mode!r} needs a tool-call parser, and this model's family has "
            f"no default one: start the server with --tool-call-parser "
            f"({', '.join(PARSERS)})",
            "tools",
        )
    return get_parser(name)


def _grammar(
    tools: tuple[Tool, ...], choice: ToolChoice, parallel: bool, parser: ToolParser | None,
    tokenizer: Any,
) -> StructuredOutputsParams | None:  # fmt: skip
    fmt = parser or get_parser("hermes")  # "none": still check every schema compiles
    forced = choice if choice.forced else ToolChoice("required")
    tags = special_tag_ids(tokenizer, fmt.markers)
    try:
        spec = StructuredOutputsParams(grammar=call_grammar(fmt, tools, forced, parallel, tags))
    except ValueError as exc:
        message = str(exc).replace("structured_outputs.grammar", "a tool's parameters schema")
        raise bad_request(f"tools: {message}", "tools") from exc
    return spec if choice.forced else None


def call_id(request_id: str, index: int) -> str:
    """The id of a choice's `index`-th call: deterministic, OpenAI's `call_` shape."""
    digest = hashlib.sha256(f"{request_id}:{index}".encode()).hexdigest()[:24]
    return f"call_{digest}"
