"""Tool calling through the server with the official `openai` client, on tiny random models:
a named `tool_choice` and `required` always return calls whose arguments parse and follow
the tool's schema (the grammar forces the parser's wire format: Llama 3 JSON on the llama,
Hermes on the qwen3 with a template that renders tools); `auto` returns text or parsed
calls; a stream assembles the same message as the whole response; a conversation with
`tool_calls` and `tool` messages renders through the template; errors are 400s in the
OpenAI error schema; the audit log of these requests verifies, and an edited one fails."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from harness import RunningServer
from openai.lib.streaming.chat import ChatCompletionStreamState

from samebits.audit import AuditLogWriter, read_log
from samebits.audit.chain import GENESIS_HASH, canonical_json, seal_entry
from samebits.audit.verify import verify_log
from samebits.engine.engine import LLMEngine
from samebits.server.app import build_app
from samebits.server.config import ServerConfig

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 6},
        "unit": {"enum": ["c", "f"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
CLOCK = {
    "type": "object",
    "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 14}},
    "required": ["zone"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": CLOCK}},
]  # fmt: skip
MESSAGES = [{"role": "user", "content": "Weather in Oslo, and the time?"}]
NAMED = {"type": "function", "function": {"name": "get_weather"}}

# A Hermes-style template (written for this test): tools in a system turn, an assistant's
# calls as <tool_call> blocks, tool results in <tool_response> blocks.
HERMES_TEMPLATE = (
    "{% if tools %}<|im_start|>system\nTools:\n<tools>\n"
    "{% for tool in tools %}{{ tool | tojson }}\n{% endfor %}</tools><|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' and m.tool_calls %}<|im_start|>assistant\n"
    "{% for c in m.tool_calls %}<tool_call>\n"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}\n'
    "</tool_call>\n{% endfor %}<|im_end|>\n"
    "{% elif m.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ m.content }}\n"
    "</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def follows(name: str, args: object) -> bool:
    """The tool's schema checked by hand (jsonschema is not a dependency)."""
    if not isinstance(args, dict):
        return False
    if name == "get_weather":
        city = args.get("city")
        return (set(args) == {"city", "unit"} and isinstance(city, str) and len(city) <= 6
                and args["unit"] in ("c", "f"))  # fmt: skip
    zone = args.get("zone")
    return name == "get_time" and set(args) == {"zone"} and type(zone) is int and -12 <= zone <= 14


def check_calls(choice, names=("get_weather", "get_time")) -> list[tuple[str, dict]]:
    calls = choice.message.tool_calls
    assert choice.finish_reason == "tool_calls", choice
    assert calls, choice
    out = []
    for call in calls:
        assert call.type == "function" and call.id.startswith("call_")
        args = json.loads(call.function.arguments)
        assert call.function.name in names and follows(call.function.name, args), call
        out.append((call.function.name, args))
    assert len({c.id for c in calls}) == len(calls)
    return out


def _serve(model_dir, tmp_path_factory, name):
    engine = LLMEngine.from_args(str(model_dir), max_num_seqs=8)
    log_path = tmp_path_factory.mktemp(name) / "audit.jsonl"
    writer = AuditLogWriter(log_path)
    server = RunningServer(build_app(engine, ServerConfig(model_names=("tiny",)), writer))
    server.engine, server.log_path, server.writer = engine, log_path, writer
    return server


@pytest.fixture(scope="module")
def llama(tiny_llama_dir, tmp_path_factory):
    """The tiny llama: family default parser llama3_json; its template ignores tools."""
    with _serve(tiny_llama_dir, tmp_path_factory, "tools_llama") as server:
        yield server
    server.writer.close()


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    """A tiny qwen3 (parser: hermes) with HERMES_TEMPLATE and room for the tools' text."""
    from tiny_models import make_tiny_checkpoint

    folder = tmp_path_factory.mktemp("qwen_tools")
    make_tiny_checkpoint(folder, "qwen3", max_position_embeddings=2048)
    (folder / "chat_template.jinja").write_text(HERMES_TEMPLATE, encoding="utf-8")
    with _serve(folder, tmp_path_factory, "tools_qwen") as server:
        yield server
    server.writer.close()


@pytest.fixture(scope="module")
def mistral(tiny_mistral_dir, tmp_path_factory):
    """The tiny mistral: parser mistral, so outputs are decoded with special tokens kept."""
    with _serve(tiny_mistral_dir, tmp_path_factory, "tools_mistral") as server:
        yield server
    server.writer.close()


def client_of(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def chat(server, **kwargs):
    body = {"model": "tiny", "messages": MESSAGES, "tools": TOOLS, "max_tokens": 120, **kwargs}
    return client_of(server).chat.completions.create(**body)


@pytest.mark.parametrize("which", ["llama", "qwen", "mistral"])
def test_named_tool_choice_returns_a_schema_valid_call(which, request):
    server = request.getfixturevalue(which)
    for seed in (1, 2, 3):
        choice = chat(server, tool_choice=NAMED, seed=seed).choices[0]
        assert check_calls(choice, ("get_weather",))
        assert len(choice.message.tool_calls) == 1 and choice.message.content is None


@pytest.mark.parametrize("which", ["llama", "qwen"])
def test_required_returns_calls_of_the_tools(which, request):
    server = request.getfixturevalue(which)
    for seed in (4, 5, 6):
        single = chat(server, tool_choice="required", seed=seed, parallel_tool_calls=False)
        assert len(check_calls(single.choices[0])) == 1
        # parallel: the model decides when to stop; EOS made likely, else a random model
        # goes on calling until max_tokens (the grammar still forces each call)
        eos = server.engine.tokenizer.eos_token_ids[0]
        parallel = chat(server, tool_choice="required", seed=seed, n=2, logit_bias={str(eos): 50})
        for choice in parallel.choices:
            check_calls(choice)


def test_auto_returns_text_or_parsed_calls(qwen):
    for seed in (7, 8):
        choice = chat(qwen, seed=seed, max_tokens=24).choices[0]
        if choice.message.tool_calls:
            check_calls(choice)
        else:
            assert choice.finish_reason in ("stop", "length")
            assert isinstance(choice.message.content, str)


def test_auto_parses_a_call_the_model_writes(qwen):
    """The model is made to write text then a call (a regex constraint, allowed with auto)."""
    call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": 3}}\n</tool_call>'
    two = (
        call
        + "\n"
        + call.replace("get_time", "get_weather").replace(
            '"zone": 3', '"city": "Oslo", "unit": "c"'
        )
    )
    extra = {"guided_regex": "Checking\\. " + _regex_literal(two)}
    whole = chat(qwen, seed=3, extra_body=extra, max_tokens=400).choices[0]
    assert whole.message.content == "Checking. "
    expected = [("get_time", {"zone": 3}), ("get_weather", {"city": "Oslo", "unit": "c"})]
    assert check_calls(whole) == expected
    chunks = list(chat(qwen, seed=3, extra_body=extra, max_tokens=400, stream=True))
    assert _assemble(chunks) == _message_of(whole)
    assert list(_check_call_deltas(chunks)) == [0, 1]  # two calls: index 0, then 1
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    assert _message_of(state.get_final_completion().choices[0]) == _message_of(whole)


@pytest.mark.parametrize("which", ["llama", "qwen"])
@pytest.mark.parametrize("kwargs", [{"tool_choice": NAMED}, {"tool_choice": "required"}])
def test_stream_assembles_the_same_message(which, kwargs, request):
    server = request.getfixturevalue(which)
    kwargs = {**kwargs, "logit_bias": {str(server.engine.tokenizer.eos_token_ids[0]): 50}}
    whole = chat(server, seed=11, **kwargs).choices[0]
    assert check_calls(whole)
    assert _assemble(chat(server, seed=11, stream=True, **kwargs)) == _message_of(whole)


@pytest.mark.parametrize("which", ["llama", "qwen", "mistral"])
def test_streamed_calls_arrive_as_openai_sends_them(which, request):
    """A forced call streams as OpenAI streams calls: a first delta (index, id, type, name,
    arguments ""), then argument fragments as the tokens come; the openai package's own
    accumulator (`ChatCompletionStreamState`) assembles the whole response's calls."""
    server = request.getfixturevalue(which)
    body = dict(tool_choice=NAMED, seed=12,
                logit_bias={str(server.engine.tokenizer.eos_token_ids[0]): 50})  # fmt: skip
    whole = chat(server, **body).choices[0]
    assert check_calls(whole, ("get_weather",))
    state, chunks = ChatCompletionStreamState(), []
    for chunk in chat(server, stream=True, **body):
        state.handle_chunk(chunk)
        chunks.append(chunk)
    assembled = state.get_final_completion().choices[0]
    assert _message_of(assembled) == _message_of(whole)
    assert assembled.message.tool_calls[0].id.startswith("call_")
    fragments = _check_call_deltas(chunks)
    assert len(fragments) == 1 and len(fragments[0]) >= 3, fragments  # token by token
    assert "".join(fragments[0]) == whole.message.tool_calls[0].function.arguments
    assert [c.choices[0].finish_reason for c in chunks][-1] == "tool_calls"


def _check_call_deltas(chunks) -> dict[int, list[str]]:
    """Each call's argument fragments, checking the deltas' shape on the way."""
    fragments: dict[int, list[str]] = {}
    for chunk in chunks:
        deltas = chunk.choices[0].delta.tool_calls or []
        assert len({d.index for d in deltas}) == len(deltas)
        for delta in deltas:
            if delta.index not in fragments:  # the first delta of a call
                assert delta.index == len(fragments) and delta.id.startswith("call_")
                assert delta.type == "function" and delta.function.name
                assert delta.function.arguments == ""
                fragments[delta.index] = []
            else:
                assert delta.id is None and delta.function.name is None
                assert delta.function.arguments
                fragments[delta.index].append(delta.function.arguments)
    return fragments


def test_auto_with_parallel_tool_calls_false_keeps_the_first_call(qwen):
    """Under auto the model may write several calls; `parallel_tool_calls: false` returns
    the first (vLLM drops the others the same way), streamed or not."""
    call = '<tool_call>\n{"name": "get_time", "arguments": {"zone": 3}}\n</tool_call>'
    two = call + "\n" + call.replace('"zone": 3', '"zone": -4')
    body = dict(seed=3, max_tokens=400, parallel_tool_calls=False,
                extra_body={"guided_regex": "Checking\\. " + _regex_literal(two)})  # fmt: skip
    whole = chat(qwen, **body).choices[0]
    assert whole.message.content == "Checking. "
    assert check_calls(whole) == [("get_time", {"zone": 3})]
    chunks = list(chat(qwen, stream=True, **body))
    assert _assemble(chunks) == _message_of(whole)
    assert list(_check_call_deltas(chunks)) == [0]
    both = chat(qwen, **{**body, "parallel_tool_calls": True}).choices[0]
    assert check_calls(both) == [("get_time", {"zone": 3}), ("get_time", {"zone": -4})]


def test_mistral_call_then_eos_is_parsed(mistral):
    """auto on Mistral: the model writes a call, then EOS (kept in the text with special
    tokens; the parser reads the text without it)."""
    call = '[TOOL_CALLS][{"name": "get_time", "arguments": {"zone": -2}}]'
    eos = mistral.engine.tokenizer.eos_token_ids[0]
    extra = {"guided_regex": _regex_literal(call) + "( more)?"}
    body = dict(seed=1, extra_body=extra, max_tokens=200, logit_bias={str(eos): 100})
    whole = chat(mistral, **body).choices[0]
    assert whole.model_extra["samebits"]["token_ids"][-1] == eos
    assert check_calls(whole) == [("get_time", {"zone": -2})] and whole.message.content is None
    assert _assemble(chat(mistral, stream=True, **body)) == _message_of(whole)


def test_multi_turn_with_a_tool_result_renders_and_runs(qwen):
    turns = [
        *MESSAGES,
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_a", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo", "unit": "c"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny, 21 C"},
    ]  # fmt: skip
    response = chat(qwen, messages=turns, seed=2, tool_choice=NAMED)
    check_calls(response.choices[0], ("get_weather",))
    ids = response.choices[0].model_extra["samebits"]["prompt_token_ids"]
    prompt = qwen.engine.tokenizer.decode(ids, skip_special_tokens=False)
    assert '{"type": "function", "function": {"name": "get_weather"' in prompt  # the tools
    assert '"arguments": {"city": "Oslo", "unit": "c"}}' in prompt  # the earlier call
    assert "<tool_response>\nsunny, 21 C\n</tool_response>" in prompt
    plain = chat(qwen, messages=turns, seed=2, tool_choice="none", max_tokens=8).choices[0]
    assert plain.message.tool_calls is None and plain.finish_reason in ("stop", "length")


def test_tool_choice_none_renders_tools_and_returns_text(llama):
    choice = chat(llama, tool_choice="none", seed=1, max_tokens=8).choices[0]
    assert choice.message.tool_calls is None and isinstance(choice.message.content, str)


BAD = [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice",
     "not in 'tools'"),
    ({"tools": None, "tool_choice": "required"}, "tool_choice", "needs 'tools'"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"a": {"type": "nonsense"}}}}}]}, "tools", "schema"),
    ({"tools": [{"type": "function"}]}, "tools", "tools[0].function"),
    ({"tools": {"a": 1}}, "tools", ""),
    ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice",
     "cannot be combined"),
    ({"functions": [{"name": "f"}]}, "functions", "legacy functions"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages", "tool_call_id"),
    ({"messages": [{"role": "assistant", "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]},
     "messages", "JSON text of an object"),
]  # fmt: skip


@pytest.mark.parametrize(("extra", "param", "fragment"), BAD)
def test_bad_tool_requests_are_400s_in_the_openai_schema(llama, extra, param, fragment):
    body = {"messages": MESSAGES, "tools": TOOLS, **extra}
    response = httpx.post(llama.url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"].startswith(param), error
    assert fragment in error["message"], error
    assert chat(llama, tool_choice=NAMED, seed=1).choices[0].finish_reason == "tool_calls"


def test_no_parser_for_the_family_is_a_400_naming_the_flag(fake_server):
    body = {"messages": MESSAGES, "tools": TOOLS}  # tool_choice defaults to "auto"
    response = httpx.post(fake_server.url + "/v1/chat/completions", json=body, timeout=60)
    assert response.status_code == 400, response.text
    assert "--tool-call-parser" in response.json()["error"]["message"]
    with pytest.raises(ValueError, match="unknown tool-call parser"):
        ServerConfig(model_names=("x",), tool_call_parser="pythonic")


@pytest.mark.parametrize("which", ["llama", "qwen"])
def test_audit_log_of_tool_requests_verifies_and_an_edit_fails(which, request, tmp_path):
    server = request.getfixturevalue(which)
    chat(server, tool_choice=NAMED, seed=21)
    eos = server.engine.tokenizer.eos_token_ids[0]
    list(chat(server, tool_choice="required", seed=22, stream=True, logit_bias={str(eos): 50}))
    entries = [e.entry for e in read_log(server.log_path).entries]
    tooled = [e for e in entries if e.get("tools")]
    assert tooled and all(json.loads(e["tools"]["tools"]) == TOOLS for e in tooled)
    named = next(e for e in tooled if e["tools"]["tool_choice"] == NAMED)
    grammar = named["sampling_params"]["structured_outputs"]["grammar"]
    assert "get_weather" in grammar and "get_time" not in grammar
    verifier = LLMEngine.from_deployment(server.engine.deployment, enable_prefix_caching=False)
    report = verify_log(read_log(server.log_path), verifier)
    assert report.exit_code == 0, [r.message for r in report.failed_results]
    assert len(report.results) == report.num_requests >= len(tooled) > 0
    streamed = next(e for e in tooled if e["tools"]["tool_choice"] == "required")
    [passed] = [r for r in report.results if r.seq == streamed["seq"]]
    assert passed.ok and passed.num_tokens == len(streamed["output_token_ids"]) > 0
    forged = tmp_path / "forged.jsonl"
    wider = grammar.replace('"maxLength":6', '"maxLength":60')
    assert wider != grammar
    cases = {
        # the function renamed everywhere, consistently: caught by the replay
        "differs at position": lambda r: _renamed(r, "get_weather", "get_wx"),
        # the grammar alone, or the tools alone, edited: caught before the replay
        "logged grammar is not": lambda r: _with_grammar(r, wider),
        "not the one the logged tools": lambda r: _with_tools(r, _wider(r["tools"]["tools"])),
    }
    for fragment, edit in cases.items():
        forged.write_text(_resealed(entries, named["seq"], edit))
        report = verify_log(read_log(forged), verifier)
        assert report.chain_issues == [] and report.exit_code == 1, fragment
        [failed] = report.failed_results
        assert failed.seq == named["seq"] and fragment in failed.message, (fragment, failed)
    # the streamed request's entry edited: its grammar widened, or its tools narrowed
    streamed_grammar = streamed["sampling_params"]["structured_outputs"]["grammar"]
    for fragment, edit in {
        "logged grammar is not": lambda r: _with_grammar(
            r, streamed_grammar.replace('"maxLength":6', '"maxLength":60')
        ),
        "not the one the logged tools": lambda r: _with_tools(r, _wider(r["tools"]["tools"])),
    }.items():
        forged.write_text(_resealed(entries, streamed["seq"], edit))
        report = verify_log(read_log(forged), verifier)
        [failed] = report.failed_results
        assert failed.seq == streamed["seq"] and fragment in failed.message, (fragment, failed)


def _with_grammar(record: dict, grammar: str) -> None:
    params = record["sampling_params"]
    record["sampling_params"] = {**params, "structured_outputs": {"grammar": grammar}}


def _with_tools(record: dict, tools_text: str) -> None:
    record["tools"] = {**record["tools"], "tools": tools_text}


def _renamed(record: dict, old: str, new: str) -> None:
    grammar = record["sampling_params"]["structured_outputs"]["grammar"]
    _with_grammar(record, grammar.replace(old, new))
    _with_tools(record, record["tools"]["tools"].replace(old, new))
    record["tools"]["tool_choice"] = {"type": "function", "function": {"name": new}}


def _wider(tools_text: str) -> str:
    tools = json.loads(tools_text)
    tools[0]["function"]["parameters"]["properties"]["city"]["maxLength"] = 60
    return json.dumps(tools)


def _resealed(entries: list[dict], seq: int, edit) -> str:
    """The log with `edit(record)` applied to entry `seq`, the chain sealed again."""
    lines, prev = [], GENESIS_HASH
    for entry in entries:
        record = {k: v for k, v in entry.items() if k not in ("seq", "prev_hash", "entry_hash")}
        if entry["seq"] == seq:
            edit(record)
        sealed = seal_entry(record, entry["seq"], prev)
        prev = sealed["entry_hash"]
        lines.append(canonical_json(sealed) + "\n")
    return "".join(lines)


def _message_of(choice) -> dict:
    """Content, calls (name, arguments) and finish reason; ids differ between requests."""
    calls = [(c.function.name, c.function.arguments) for c in choice.message.tool_calls or []]
    return {"content": choice.message.content or "", "calls": calls,
            "finish_reason": choice.finish_reason}  # fmt: skip


def _assemble(stream) -> dict:
    """A streamed choice 0 assembled as the OpenAI client's stream helpers do: content
    appended; tool-call deltas merged by index (id, name once; arguments appended)."""
    content, calls, finish = "", {}, None
    for chunk in stream:
        for choice in chunk.choices:
            delta = choice.delta
            content += delta.content or ""
            for part in delta.tool_calls or []:
                slot = calls.setdefault(part.index, {"id": None, "name": "", "arguments": ""})
                slot["id"] = part.id or slot["id"]
                if part.function is not None:
                    slot["name"] += part.function.name or ""
                    slot["arguments"] += part.function.arguments or ""
            finish = choice.finish_reason or finish
    ordered = [calls[i] for i in sorted(calls)]
    assert sorted(calls) == list(range(len(calls)))
    assert all(c["id"].startswith("call_") for c in ordered)
    assert len({c["id"] for c in ordered}) == len(ordered)
    return {"content": content, "calls": [(c["name"], c["arguments"]) for c in ordered],
            "finish_reason": finish}  # fmt: skip


def _regex_literal(text: str) -> str:
    """`text` as a regex matching exactly it."""
    meta = set("\\.+*?()|[]{}^$#&-~")
    return "".join("\\n" if c == "\n" else "\\" + c if c in meta else c for c in text)
