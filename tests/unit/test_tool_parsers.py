"""Tool-call parsers (Hermes, Llama 3 JSON, Mistral): whole outputs, malformed outputs (plain
text, never an exception), the stream's settled pieces joining to the whole parse at every
split point, tool / tool_choice checks, and the forced-call grammars (accepted by llguidance;
the text of a well-formed call is in their language, a call of another tool is not)."""

from __future__ import annotations

import json

import pytest

from samebits.tools.calls import ToolCall
from samebits.tools.grammar import call_grammar
from samebits.tools.parsers import PARSERS, default_parser_name, get_parser
from samebits.tools.spec import ToolChoice, ToolSpecError, parse_tool_choice, parse_tools
from samebits.tools.stream import ToolCallStream

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = parse_tools([
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "now", "description": "the time"}},
])  # fmt: skip

HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
CASES = {
    "hermes": [
        (HERMES_CALL, None, [("get_weather", {"city": "Oslo"})]),
        ("Let me check.\n" + HERMES_CALL + "\n" + HERMES_CALL.replace("Oslo", "Rome"),
         "Let me check.\n", [("get_weather", {"city": "Oslo"}), ("get_weather", {"city": "Rome"})]),
        ('<tool_call>{"name": "now", "parameters": {}}</tool_call> done', " done", [("now", {})]),
        ("no call here", "no call here", []),
        ("<tool_call>{not json}</tool_call>", "<tool_call>{not json}</tool_call>", []),
        ('<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"arguments": {}}</tool_call>', []),
        ('<tool_call>\n{"name": "now", "arguments": {', '<tool_call>\n{"name": "now", "arguments": {', []),
        ('<tool_call>{"name": "now", "arguments": [1]}</tool_call>',
         '<tool_call>{"name": "now", "arguments": [1]}</tool_call>', []),
    ],
    "llama3_json": [
        ('{"name": "get_weather", "parameters": {"city": "Oslo"}}', None,
         [("get_weather", {"city": "Oslo"})]),
        ('<|python_tag|>{"name": "now", "parameters": {}}; {"name": "now", "arguments": {}}', None,
         [("now", {}), ("now", {})]),
        ('{"name": "now", "parameters": "{\\"a\\": 1}"}', None, [("now", {"a": 1})]),
        ("Hello there", "Hello there", []),
        ('{"name": "now", "parameters": {}} trailing', '{"name": "now", "parameters": {}} trailing', []),
        ('{"city": "Oslo"}', '{"city": "Oslo"}', []),
        ('{"name": "now", "parameters": {', '{"name": "now", "parameters": {', []),
        ("", None, []),
    ],
    "mistral": [
        ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}]', None,
         [("get_weather", {"city": "Oslo"})]),
        ('Sure [TOOL_CALLS] [{"name": "now", "arguments": {}}, {"name": "now", "arguments": {}}]',
         "Sure ", [("now", {}), ("now", {})]),
        ("[TOOL_CALLS] not json", "[TOOL_CALLS] not json", []),
        ('[TOOL_CALLS][{"name": "now"}, 3]', '[TOOL_CALLS][{"name": "now"}, 3]', []),
        ('[TOOL_CALLS][{"name": "now", "arguments": {}}] extra',
         '[TOOL_CALLS][{"name": "now", "arguments": {}}] extra', []),
        ("plain", "plain", []),
        ('[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}', None, [("get_weather", {"city": "Oslo"})]),
        ('ok [TOOL_CALLS]now[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}\n', "ok ",
         [("now", {}), ("get_weather", {"city": "Rome"})]),
        ("[TOOL_CALLS]now{}", "[TOOL_CALLS]now{}", []),
        ("[TOOL_CALLS]now[ARGS]{} tail", "[TOOL_CALLS]now[ARGS]{} tail", []),
        ("[TOOL_CALLS]now[ARGS][1]", "[TOOL_CALLS]now[ARGS][1]", []),
    ],
}  # fmt: skip
ALL = [(name, *case) for name, cases in CASES.items() for case in cases]


@pytest.mark.parametrize(("parser", "text", "content", "calls"), ALL)
def test_parse_whole_output(parser, text, content, calls):
    parsed = get_parser(parser).parse(text)
    assert parsed.content == content
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == calls


@pytest.mark.parametrize(("parser", "text", "content", "calls"), ALL)
def test_stream_pieces_join_to_the_whole_parse_at_every_split(parser, text, content, calls):
    whole = get_parser(parser).parse(text)
    for step in (1, 2, 5):
        stream = ToolCallStream(get_parser(parser))
        got_content, got_calls = "", []
        for end in range(step, len(text), step):
            piece = stream.update(text[:end])
            got_content += piece.content
            got_calls += piece.calls
        piece = stream.finish(text)
        got_content += piece.content
        got_calls += piece.calls
        assert got_content == (whole.content or "")
        assert [i for i, _ in got_calls] == list(range(len(whole.calls)))
        assert tuple(c for _, c in got_calls) == whole.calls


def test_hermes_stream_sends_a_call_when_it_closes_and_holds_a_partial_marker():
    stream = ToolCallStream(get_parser("hermes"))
    assert stream.update("Hi <tool").content == "Hi "
    assert stream.update("Hi <tool_call>{").calls == ()
    piece = stream.update("Hi " + HERMES_CALL)
    assert piece.calls == ((0, ToolCall("get_weather", '{"city": "Oslo"}')),)
    assert stream.update("Hi " + HERMES_CALL + " more").content == ""  # after a call: held


def test_whitespace_only_content_is_none_and_never_streamed():
    stream = ToolCallStream(get_parser("hermes"))
    assert stream.update("\n\n").content == ""
    assert stream.finish("\n\n" + HERMES_CALL).content == ""
    assert get_parser("hermes").parse("\n" + HERMES_CALL + "\n").content is None


def test_call_to_openai_shape():
    call = ToolCall("now", "{}")
    assert call.to_openai("call_1") == {
        "id": "call_1", "type": "function", "function": {"name": "now", "arguments": "{}"},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("tools", "fragment"),
    [
        ({"type": "function"}, "must be a list"),
        ([{"type": "retrieval"}], "tools[0] must be"),
        ([{"type": "function", "function": {"name": "bad name"}}], "must match"),
        ([{"type": "function", "function": {"name": "f", "parameters": []}}], "JSON schema"),
        ([{"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}}],
         "describe an object"),
        ([{"type": "function", "function": {"name": "f"}}] * 2, "twice"),
    ],
)  # fmt: skip
def test_bad_tools(tools, fragment):
    with pytest.raises(ToolSpecError, match=fragment.replace("[", r"\[")) as info:
        parse_tools(tools)
    assert info.value.param == "tools"


@pytest.mark.parametrize(
    ("choice", "tools", "fragment"),
    [
        ("sometimes", TOOLS, "must be one of"),
        ({"type": "function", "function": {"name": "nope"}}, TOOLS, "not in 'tools'"),
        ({"type": "function"}, TOOLS, "must be 'none'"),
        ("required", (), "needs 'tools'"),
        ({"type": "function", "function": {"name": "now"}}, (), "needs 'tools'"),
    ],
)
def test_bad_tool_choice(choice, tools, fragment):
    with pytest.raises(ToolSpecError, match=fragment) as info:
        parse_tool_choice(choice, tools)
    assert info.value.param == "tool_choice"


def test_tool_choice_defaults_and_modes():
    assert parse_tool_choice(None, TOOLS) == ToolChoice("auto")
    assert parse_tool_choice(None, ()) == ToolChoice("none")
    assert parse_tool_choice("none", ()) == ToolChoice("none")
    named = parse_tool_choice({"type": "function", "function": {"name": "now"}}, TOOLS)
    assert named == ToolChoice("named", "now") and named.forced
    assert parse_tool_choice("required", TOOLS).forced
    assert not parse_tool_choice("auto", TOOLS).forced


def test_family_defaults():
    assert default_parser_name("qwen3") == "hermes"
    assert default_parser_name("llama") == "llama3_json"
    assert default_parser_name("mixtral") == "mistral"
    assert default_parser_name("gemma3_text") is None
    with pytest.raises(ValueError, match="known"):
        get_parser("pythonic")


WELL_FORMED = {
    "hermes": ('<tool_call>\n{"name": "get_weather", "arguments": {"city":"Oslo"}}\n</tool_call>'),
    "llama3_json": '{"name": "get_weather", "parameters": {"city":"Oslo"}}',
    "mistral": '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city":"Oslo"}}]',
}


@pytest.fixture(scope="module")
def tiny_view():
    from samebits.model.tokenizer import Tokenizer
    from samebits.structured.matcher import GrammarTokenizer
    from tiny_models import train_tiny_tokenizer

    tokenizer = Tokenizer(train_tiny_tokenizer(), eos_token_ids=[0])
    return tokenizer, GrammarTokenizer(tokenizer, tokenizer.vocab_size)


@pytest.mark.parametrize("parser", sorted(PARSERS))
def test_forced_grammar_accepts_a_call_of_the_named_tool_only(parser, tiny_view):
    fmt = get_parser(parser)
    named = call_grammar(fmt, TOOLS, ToolChoice("named", "get_weather"), False, {})
    other = call_grammar(fmt, TOOLS, ToolChoice("named", "now"), False, {})
    text = WELL_FORMED[parser]
    assert _matches(tiny_view, named, text)
    assert not _matches(tiny_view, other, text)
    assert not _matches(tiny_view, named, text.replace('"city":"Oslo"', '"town":"Oslo"'))
    assert not _matches(tiny_view, named, text.replace('"city":"Oslo"', '"city": "Oslo"'))
    assert fmt.parse(text).calls[0].name == "get_weather"


def test_a_schema_without_type_still_forces_an_object(tiny_view):
    fmt = get_parser("llama3_json")
    tools = parse_tools([{"type": "function", "function": {"name": "f", "parameters": {}}}])
    grammar = call_grammar(fmt, tools, ToolChoice("required"), False, {})
    assert _matches(tiny_view, grammar, '{"name": "f", "parameters": {"a":1}}')
    assert not _matches(tiny_view, grammar, '{"name": "f", "parameters": 7}')


def test_parallel_grammar_takes_several_calls(tiny_view):
    fmt = get_parser("hermes")
    two = WELL_FORMED["hermes"] + "\n" + WELL_FORMED["hermes"].replace("Oslo", "Rome")
    one = call_grammar(fmt, TOOLS, ToolChoice("required"), False, {})
    many = call_grammar(fmt, TOOLS, ToolChoice("required"), True, {})
    assert _matches(tiny_view, many, two) and not _matches(tiny_view, one, two)
    assert _matches(tiny_view, one, WELL_FORMED["hermes"])


def test_special_marker_is_its_token_id():
    fmt = get_parser("mistral")
    grammar = call_grammar(fmt, TOOLS, ToolChoice("required"), False, {"[TOOL_CALLS]": 9})
    assert grammar.splitlines()[1].startswith("start: <[9]> ")


def test_special_tag_ids_finds_markers_that_are_one_special_token():
    from tokenizers import AddedToken

    from samebits.model.tokenizer import Tokenizer
    from samebits.tools.grammar import special_tag_ids
    from tiny_models import train_tiny_tokenizer

    backend = train_tiny_tokenizer()
    backend.add_tokens([AddedToken("<tool_call>", special=False)])
    backend.add_special_tokens([AddedToken("[TOOL_CALLS]", special=True)])
    tokenizer = Tokenizer(backend, eos_token_ids=[0])
    found = special_tag_ids(tokenizer, ("[TOOL_CALLS]", "<tool_call>", "<|python_tag|>"))
    marker = tokenizer.encode("[TOOL_CALLS]")[0]
    assert found == {"[TOOL_CALLS]": marker}
    # the forced Mistral output starts with that one token, never with "[" spelled out
    from samebits.structured import StructuredOutputsParams
    from samebits.structured.matcher import GrammarMatcher, GrammarTokenizer

    grammar = call_grammar(get_parser("mistral"), TOOLS, ToolChoice("required"), False, found)
    view = GrammarTokenizer(tokenizer, tokenizer.vocab_size)
    allowed = GrammarMatcher(view, StructuredOutputsParams(grammar=grammar)).allowed()
    assert allowed.nonzero()[0].tolist() == [marker]


def test_mistral_v11_grammar_when_the_tokenizer_has_an_args_token():
    from tokenizers import AddedToken

    from samebits.model.tokenizer import Tokenizer
    from samebits.structured import StructuredOutputsParams
    from samebits.structured.matcher import GrammarMatcher, GrammarTokenizer
    from samebits.tools.grammar import special_tag_ids
    from tiny_models import train_tiny_tokenizer

    backend = train_tiny_tokenizer()
    backend.add_special_tokens([AddedToken(t, special=True) for t in ("[TOOL_CALLS]", "[ARGS]")])
    tokenizer = Tokenizer(backend, eos_token_ids=[0])
    fmt = get_parser("mistral")
    tags = special_tag_ids(tokenizer, fmt.markers)
    assert set(tags) == {"[TOOL_CALLS]", "[ARGS]"}
    grammar = call_grammar(fmt, TOOLS, ToolChoice("named", "get_weather"), False, tags)
    matcher = GrammarMatcher(GrammarTokenizer(tokenizer, tokenizer.vocab_size),
                             StructuredOutputsParams(grammar=grammar))  # fmt: skip
    text = '[TOOL_CALLS]get_weather[ARGS]{"city":"Oslo"}'
    for token in tokenizer.encode(text):
        assert matcher.allowed()[token]
        matcher.accept(token)
    assert matcher.terminated or matcher.allowed()[0]
    assert fmt.parse(tokenizer.decode(tokenizer.encode(text), skip_special_tokens=False)).calls


def _matches(view, grammar: str, text: str) -> bool:
    """Whether `text` (tiny tokenizer ids) is a complete sentence of `grammar`."""
    from samebits.structured import StructuredOutputsParams
    from samebits.structured.matcher import GrammarMatcher

    tokenizer, grammar_view = view
    matcher = GrammarMatcher(grammar_view, StructuredOutputsParams(grammar=grammar))
    for token in tokenizer.encode(text):
        if not matcher.allowed()[token]:
            return False
        matcher.accept(token)
    return matcher.terminated or bool(matcher.allowed()[0])
