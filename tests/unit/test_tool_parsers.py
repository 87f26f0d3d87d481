"""Tool-call parsers (Hermes, Llama 3 JSON, Mistral): whole outputs, malformed outputs (plain
text, never an exception), the stream's settled pieces joining to the whole parse at every
split point, tool / tool_choice checks, and the forced-call grammars (accepted by llguidance;
the text of a well-formed call is in their language, a call of another tool is not)."""

from __future__ import annotations

import json

import pytest

from samebits.tools.calls import Scan, ToolCall
from samebits.tools.grammar import call_grammar
from samebits.tools.parsers import PARSERS, default_parser_name, get_parser
from samebits.tools.spec import ToolChoice, ToolSpecError, parse_tool_choice, parse_tools
from samebits.tools.stream import CallDelta, StreamPiece, ToolCallStream

WEATHER = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = parse_tools([
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
    {"type": "function", "function": {"name": "now", "description": "the time"}},
])  # fmt: skip

HERMES_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'
HARD = '{"q": "a \\"b\\" \\\\ \\u00e9 é 😀 {x] </tool_call> [TOOL_CALLS]", "n": [1, {"m": []}]}'
# (text, content, [(name, arguments: the model's text of them, character for character)])
CASES = {
    "hermes": [
        (HERMES_CALL, None, [("get_weather", '{"city": "Oslo"}')]),
        ("Let me check.\n" + HERMES_CALL + "\n" + HERMES_CALL.replace("Oslo", "Rome"),
         "Let me check.\n", [("get_weather", '{"city": "Oslo"}'), ("get_weather", '{"city": "Rome"}')]),
        ('<tool_call>{"name": "now", "parameters": {}}</tool_call> done', " done", [("now", "{}")]),
        ("no call here", "no call here", []),
        ("<tool_call>{not json}</tool_call>", "<tool_call>{not json}</tool_call>", []),
        ('<tool_call>{"arguments": {}}</tool_call>', '<tool_call>{"arguments": {}}</tool_call>', []),
        # a call is a call from its head on: cut short, its arguments are what was written
        ('<tool_call>\n{"name": "now", "arguments": {"a": "x', None, [("now", '{"a": "x')]),
        ('<tool_call>\n{"name": "no', '<tool_call>\n{"name": "no', []),
        ('<tool_call>{"name": "now", "arguments": [1]}</tool_call>',
         '<tool_call>{"name": "now", "arguments": [1]}</tool_call>', []),
        # another shape is read whole at its close: keys swapped, arguments re-serialized
        ('<tool_call>{"arguments": {"a":1}, "name": "now"}</tool_call>', None, [("now", '{"a": 1}')]),
        ("x\n<tool_call>{bad}</tool_call>\n" + HERMES_CALL + "\n \n", "x\n<tool_call>{bad}</tool_call>\n",
         [("get_weather", '{"city": "Oslo"}')]),
        ('<tool_call>{"name": "f", "arguments": ' + HARD + '}</tool_call>', None, [("f", HARD)]),
        ("a <tool_call", "a <tool_call", []),
        # a missing close: the next block still starts a call
        ('<tool_call>{"name": "a", "arguments": {}} <tool_call>{"name": "b", "arguments": {}}'
         "</tool_call>", None, [("a", "{}"), ("b", "{}")]),
    ],
    "llama3_json": [
        ('{"name": "get_weather", "parameters": {"city": "Oslo"}}', None,
         [("get_weather", '{"city": "Oslo"}')]),
        ('<|python_tag|>{"name": "now", "parameters": {}}; {"name": "now", "arguments": {}}', None,
         [("now", "{}"), ("now", "{}")]),
        ('{"name": "now", "parameters": "{\\"a\\": 1}"}', None, [("now", '{"a": 1}')]),
        ("Hello there", "Hello there", []),
        ('{"name": "now", "parameters": {}} trailing', " trailing", [("now", "{}")]),
        ('{"city": "Oslo"}', '{"city": "Oslo"}', []),
        ('{"name": "now", "parameters": {', None, [("now", "{")]),
        ('{"name": "now", "parameters": {}};', None, [("now", "{}")]),
        ('{"name": "f", "parameters": ' + HARD + '}', None, [("f", HARD)]),
        ("<|python_", "<|python_", []),
        ("", None, []),
    ],
    "mistral": [
        ('[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Oslo"}}]', None,
         [("get_weather", '{"city": "Oslo"}')]),
        ('Sure [TOOL_CALLS] [{"name": "now", "arguments": {}}, {"name": "now", "arguments": {}}]',
         "Sure ", [("now", "{}"), ("now", "{}")]),
        ("[TOOL_CALLS] not json", "[TOOL_CALLS] not json", []),
        ('[TOOL_CALLS][3, {"name": "now"}]', '[TOOL_CALLS][3, {"name": "now"}]', []),
        ('[TOOL_CALLS][{"name": "now", "arguments": {}}] extra', " extra", [("now", "{}")]),
        ("plain", "plain", []),
        ("plain [TOOL_", "plain [TOOL_", []),
        ('[TOOL_CALLS]get_weather[ARGS]{"city": "Oslo"}', None, [("get_weather", '{"city": "Oslo"}')]),
        ('ok [TOOL_CALLS]now[ARGS]{}[TOOL_CALLS]get_weather[ARGS]{"city": "Rome"}\n', "ok ",
         [("now", "{}"), ("get_weather", '{"city": "Rome"}')]),
        ("[TOOL_CALLS]now{}", "[TOOL_CALLS]now{}", []),
        ("[TOOL_CALLS]now[ARGS]{} tail", " tail", [("now", "{}")]),
        ("[TOOL_CALLS]now[ARGS][1]", "[TOOL_CALLS]now[ARGS][1]", []),
        ("[TOOL_CALLS]f[ARGS]" + HARD, None, [("f", HARD)]),
        ('[TOOL_CALLS][{"name": "f", "arguments": ' + HARD + "}]", None, [("f", HARD)]),
    ],
}  # fmt: skip
ALL = [(name, *case) for name, cases in CASES.items() for case in cases]


@pytest.mark.parametrize(("parser", "text", "content", "calls"), ALL)
def test_parse_whole_output(parser, text, content, calls):
    parsed = get_parser(parser).parse(text)
    assert parsed.content == content
    assert [(c.name, c.arguments) for c in parsed.calls] == calls


def test_hard_arguments_are_one_json_object():
    assert json.loads(HARD)["q"] == 'a "b" \\ é é 😀 {x] </tool_call> [TOOL_CALLS]'


@pytest.mark.parametrize(("parser", "text", "content", "calls"), ALL)
def test_scan_of_a_prefix_is_a_prefix_of_every_later_scan(parser, text, content, calls):
    """The stream's invariant, at every split point (every character: any tokenization)."""
    fmt = get_parser(parser)
    scans = [fmt.scan(text[:end], final=False) for end in range(len(text) + 1)]
    scans.append(fmt.scan(text, final=True))
    for before, after in zip(scans, scans[1:], strict=False):
        assert before.is_prefix_of(after), (before, after)


def assemble(pieces) -> tuple[str, list[list[str]]]:
    """Content and [name, arguments] per call, as a client merges deltas by index; checks
    OpenAI's shape: a call's first delta has its name and arguments "", later ones only
    fragments, one delta per call index in a piece."""
    content, calls = "", []
    for piece in pieces:
        content += piece.content
        assert len({d.index for d in piece.calls}) == len(piece.calls)
        for delta in piece.calls:
            if delta.name is not None:
                assert delta.index == len(calls) and delta.arguments == ""
                calls.append([delta.name, ""])
            else:
                assert delta.arguments and delta.index < len(calls)
                calls[delta.index][1] += delta.arguments
    return content, calls


def stream_pieces(parser: str, text: str, step: int, max_calls=None) -> list:
    stream = ToolCallStream(get_parser(parser), max_calls)
    pieces = []
    for end in range(step, len(text), step):
        pieces += stream.update(text[:end])
    return pieces + stream.finish(text)


@pytest.mark.parametrize(("parser", "text", "content", "calls"), ALL)
def test_stream_pieces_join_to_the_whole_parse_at_every_split(parser, text, content, calls, caplog):
    whole = get_parser(parser).parse(text)
    for step in (1, 2, 3, 7, len(text) + 1):
        got_content, got_calls = assemble(stream_pieces(parser, text, step))
        assert got_content == (whole.content or "")
        assert got_calls == [[c.name, c.arguments] for c in whole.calls]
    assert not caplog.records  # the stream never found its sent pieces contradicted


@pytest.mark.parametrize(("parser", "text", "content", "calls"), ALL)
def test_stream_fed_token_by_token_joins_to_the_whole_parse(parser, text, content, calls):
    """As the server feeds it: the text the incremental detokenizer releases per token of
    the tiny byte-level tokenizer (multi-byte characters whole, markers split anywhere)."""
    from samebits.detokenizer import IncrementalDetokenizer
    from tiny_models import train_tiny_tokenizer

    backend = train_tiny_tokenizer()
    ids = backend.encode(text, add_special_tokens=False).ids
    detok, stream, pieces = (
        IncrementalDetokenizer(backend, False),
        ToolCallStream(get_parser(parser)),
        [],
    )
    for token in ids:
        detok.append(token)
        pieces += stream.update(detok.text)
    detok.flush()
    pieces += stream.finish(detok.text)
    whole = get_parser(parser).parse(detok.text)
    assert detok.text == text  # the tiny tokenizer round-trips every case
    assert assemble(pieces) == (whole.content or "", [[c.name, c.arguments] for c in whole.calls])


def test_scan_prefix_order():
    a, b = ToolCall("f", '{"a'), ToolCall("f", '{"a": 1}')
    assert Scan("x", (a,)).is_prefix_of(Scan("xy", (b, a)))
    assert Scan("").is_prefix_of(Scan("", (b, b)))
    assert not Scan("x", (b,)).is_prefix_of(Scan("x", (a,)))  # arguments shrank
    assert not Scan("x", (a,)).is_prefix_of(Scan("x", (ToolCall("g", '{"a'),)))  # renamed
    assert not Scan("x", (a, a)).is_prefix_of(Scan("x", (b, a)))  # an earlier call changed
    assert not Scan("x").is_prefix_of(Scan("y"))
    assert not Scan("", (a,)).is_prefix_of(Scan(""))


@pytest.mark.parametrize("parser", sorted(PARSERS))
def test_stream_sends_arguments_as_they_are_written(parser):
    """Each update sends the new argument characters: nothing held inside the arguments."""
    prefix = {
        "hermes": '<tool_call>\n{"name": "f", "arguments": ',
        "llama3_json": '{"name": "f", "parameters": ',
        "mistral": "[TOOL_CALLS]f[ARGS]",
    }
    text = prefix[parser] + HARD
    stream = ToolCallStream(get_parser(parser))
    assert stream.update(text[: len(prefix[parser]) - 1]) == [StreamPiece("")]
    start = len(prefix[parser])
    first = stream.update(text[: start + 1])
    assert first == [
        StreamPiece("", (CallDelta(0, "f", ""),)),
        StreamPiece("", (CallDelta(0, None, "{"),)),
    ]
    for end in range(start + 2, len(text) + 1):
        assert stream.update(text[:end]) == [StreamPiece("", (CallDelta(0, None, text[end - 1]),))]
    assert stream.finish(text) == [StreamPiece("")]


def test_hermes_stream_holds_a_partial_marker_and_streams_content_and_calls():
    stream = ToolCallStream(get_parser("hermes"))
    assert stream.update("Hi <tool") == [StreamPiece("Hi ")]
    assert stream.update("Hi <tool_call>\n{") == [StreamPiece("")]
    assert stream.update('Hi <tool_call>\n{"name": "get_weather", "arguments": {"ci') == [
        StreamPiece("", (CallDelta(0, "get_weather", ""),)),
        StreamPiece("", (CallDelta(0, None, '{"ci'),)),
    ]  # fmt: skip
    piece = stream.update("Hi " + HERMES_CALL)
    assert piece == [StreamPiece("", (CallDelta(0, None, 'ty": "Oslo"}'),))]
    assert stream.update("Hi " + HERMES_CALL + "\n") == [StreamPiece("")]  # after a call: held
    assert stream.update("Hi " + HERMES_CALL + "\nok") == [StreamPiece("\nok")]
    assert stream.calls_sent == (ToolCall("get_weather", '{"city": "Oslo"}'),)


def test_a_stream_limited_to_one_call_drops_the_others_as_the_whole_parse_does():
    text = "Let me check.\n" + HERMES_CALL + "\n" + HERMES_CALL.replace("Oslo", "Rome")
    content, calls = assemble(stream_pieces("hermes", text, 3, max_calls=1))
    assert content == "Let me check.\n" and calls == [["get_weather", '{"city": "Oslo"}']]


def test_whitespace_only_content_is_none_and_never_streamed():
    stream = ToolCallStream(get_parser("hermes"))
    assert stream.update("\n\n") == [StreamPiece("")]
    assert [p.content for p in stream.finish("\n\n" + HERMES_CALL)] == ["", ""]
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
