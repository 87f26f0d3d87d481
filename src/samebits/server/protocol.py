"""Request bodies of the OpenAI-compatible API (pydantic, strict types), and the parameters
this server refuses.

Strict: a string where a number is expected, a float for an integer or 0/1 for a boolean is
a type error (HTTP 400), never coerced. Extensions beyond OpenAI (vLLM's names): `top_k`,
`min_p`, `min_tokens`, `ignore_eos`, `repetition_penalty`, `stop_token_ids`,
`skip_special_tokens`, `include_stop_str_in_output`, `add_special_tokens`, chat's
`add_generation_prompt`, and the structured-outputs fields (`guided_json`, `guided_regex`,
`guided_choice`, `guided_grammar`, `guided_whitespace_pattern`, `guided_decoding_backend`,
`structured_outputs`), which `structured.py` checks and combines with `response_format`.
Chat's `tools`, `tool_choice` and `parallel_tool_calls` are checked in `tools.py`.
`logit_bias` keys are checked against the model in `params.py` (the
vocabulary size is not known here).

Every other OpenAI or vLLM request parameter is in `REFUSED` (a 400 naming it when set to
anything but a value that changes nothing) or in `IGNORED` (bookkeeping that cannot change
the output); docs/server.md's parameter table lists the same, with the same messages
(tests/server/test_server_parameters.py). Fields nobody defines are ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

SEED_LIMIT = 2**63
MAX_TOP_LOGPROBS = 20

TokenIds = list[Annotated[int, Field(ge=0)]]
StopField = str | list[str] | None


class StreamOptions(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    include_usage: bool = False


class _SamplingFields(BaseModel):
    """Fields shared by completions and chat completions."""

    model_config = ConfigDict(strict=True, extra="ignore")

    model: str | None = None
    n: int = Field(1, ge=1)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = Field(0, ge=-1)
    min_p: float = Field(0.0, ge=0.0, le=1.0)
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(1.0, gt=0.0)
    stop: StopField = None
    stop_token_ids: TokenIds | None = None
    seed: int | None = Field(None, ge=0, lt=SEED_LIMIT)
    min_tokens: int = Field(0, ge=0)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logit_bias: dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    guided_json: dict[str, Any] | str | None = None
    guided_regex: str | None = None
    guided_choice: list[str] | None = None
    guided_grammar: str | None = None
    guided_whitespace_pattern: str | None = None
    guided_decoding_backend: str | None = None
    structured_outputs: dict[str, Any] | None = None

    def unsupported(self) -> list[tuple[str, str]]:
        """(field, reason) for each combination of fields this server cannot honour."""
        return []


class CompletionRequest(_SamplingFields):
    """POST /v1/completions."""

    kind: ClassVar[str] = "completions"

    prompt: str | list[str] | TokenIds | list[TokenIds]
    max_tokens: int | None = Field(None, ge=0)  # 0: score the prompt only (with echo)
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    add_special_tokens: bool = True  # vLLM: the tokenizer's BOS etc. around a string prompt

    def unsupported(self) -> list[tuple[str, str]]:
        found = super().unsupported()
        if self.max_tokens == 0 and not self.echo:
            found.append(("max_tokens", "max_tokens 0 is only allowed with echo (prompt scoring)"))
        return found


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """One message. `tool_calls` (assistant: the calls it made, OpenAI's shape) and
    `tool_call_id` (tool: the call this result answers) are checked in `prompts.py`."""

    model_config = ConfigDict(strict=True, extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(_SamplingFields):
    """POST /v1/chat/completions."""

    kind: ClassVar[str] = "chat"

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    add_generation_prompt: bool = True  # vLLM: end the template with the assistant's turn
    add_special_tokens: bool = False  # vLLM: the template writes them; True adds BOS again
    tools: list[Any] | None = None  # checked in server/tools.py (a 400 naming `tools`)
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool = True

    def unsupported(self) -> list[tuple[str, str]]:
        found = super().unsupported()
        if self.top_logprobs and not self.logprobs:
            found.append(("top_logprobs", "top_logprobs requires logprobs to be true"))
        return found


BOTH = ("completions", "chat")
CHAT = ("chat",)
COMPLETIONS = ("completions",)


@dataclass(frozen=True)
class Refused:
    """A request parameter this server cannot honour: a 400 naming it, with `message`, when
    it is set to anything but one of `harmless` (values that change nothing; JSON null is
    always harmless). `example` is a value that is refused (docs test)."""

    name: str
    message: str
    example: Any
    harmless: tuple[Any, ...] = ()
    endpoints: tuple[str, ...] = BOTH

    def refuses(self, value: Any) -> bool:
        if value is None:
            return False
        return not any(type(value) is type(h) and value == h for h in self.harmless)


_NO_FUNCTIONS = "the legacy functions API is not supported; use tools and tool_choice"
REFUSED = (
    # OpenAI
    Refused("best_of", "best_of other than 1 is not supported; use n", 2, (1,)),
    Refused("suffix", "suffix is not supported", "z", ("",), COMPLETIONS),
    Refused("functions", f"functions: {_NO_FUNCTIONS}", [{"name": "f"}], ([],), CHAT),
    Refused("function_call", f"function_call: {_NO_FUNCTIONS}", "auto", ("none",), CHAT),
    Refused("audio", "audio output is not supported", {"voice": "alloy"}, (), CHAT),
    Refused("modalities", "only the 'text' modality is supported", ["audio"], (["text"],), CHAT),
    Refused("prediction", "predicted outputs are not supported", {"type": "content"}, (), CHAT),
    Refused("reasoning_effort", "reasoning_effort is not supported", "low", (), CHAT),
    Refused("verbosity", "verbosity is not supported", "low", (), CHAT),
    Refused("web_search_options", "web search is not supported", {}, (), CHAT),
    # vLLM
    Refused("prompt_logprobs", "prompt_logprobs is not supported here; use echo with logprobs", 1),
    Refused("use_beam_search", "beam search is not supported", True, (False,)),
    Refused("length_penalty", "length_penalty is a beam search parameter", 0.5, (1.0, 1)),
    Refused("allowed_token_ids", "allowed_token_ids is not supported; use logit_bias", [1]),
    Refused("bad_words", "bad_words is not supported; use logit_bias", ["x"], ([],)),
    Refused(
        "spaces_between_special_tokens",
        "spaces_between_special_tokens false is not supported",
        False,
        (True,),
    ),  # fmt: skip
    Refused("truncate_prompt_tokens", "truncate_prompt_tokens is not supported", 8),
    Refused("echo", "echo is not supported on chat completions", True, (False,), CHAT),
    Refused(
        "continue_final_message",
        "continue_final_message is not supported",
        True,
        (False,),
        CHAT,
    ),  # fmt: skip
    Refused("chat_template", "a request's own chat_template is not supported", "{{ x }}", (), CHAT),
    Refused("chat_template_kwargs", "chat_template_kwargs is not supported", {"a": 1}, ({},), CHAT),
    Refused("documents", "documents are not supported", [{"text": "d"}], ([],), CHAT),
    Refused("mm_processor_kwargs", "multi-modal input is not supported", {"a": 1}, ({},), CHAT),
    Refused("logits_processors", "logits_processors are not supported", ["p"], ([],)),
    Refused(
        "return_tokens_as_token_ids",
        "return_tokens_as_token_ids is not supported; "
        "the token ids are in each choice's samebits.token_ids",
        True,
        (False,),
    ),  # fmt: skip
    Refused(
        "return_token_ids",
        "return_token_ids is not supported; the token ids are in "
        "samebits.token_ids and samebits.prompt_token_ids",
        True,
        (False,),
    ),  # fmt: skip
    Refused("priority", "request priorities are not supported", 1, (0,)),
    Refused("prompt_embeds", "prompt_embeds is not supported", "AAAA", (), COMPLETIONS),
    Refused("kv_transfer_params", "kv_transfer_params is not supported", {"a": 1}),
    Refused("vllm_xargs", "vllm_xargs is not supported", {"a": 1}, ({},)),
)
# accepted whatever their value; they cannot change the output
IGNORED = {
    "metadata": BOTH, "store": BOTH, "service_tier": BOTH,
    "prompt_cache_key": BOTH, "safety_identifier": BOTH, "request_id": BOTH,
    "cache_salt": BOTH,
}  # fmt: skip


def refusals(body: dict[str, Any], endpoint: str) -> list[tuple[str, str]]:
    """(param, message) for each refused parameter set in `body` (a parsed JSON object)."""
    return [
        (r.name, r.message)
        for r in REFUSED
        if endpoint in r.endpoints and r.name in body and r.refuses(body[r.name])
    ]
