"""Request bodies of the OpenAI-compatible API (pydantic, strict types).

Strict: a string where a number is expected, a float for an integer or 0/1 for a boolean is
a type error (HTTP 400), never coerced. Unknown fields are ignored, as most OpenAI-compatible
servers do; fields this server cannot honour (`tools`, `logit_bias`, `echo`, `suffix`, ...)
are rejected when set. Extensions beyond OpenAI: `top_k`, `min_p`, `ignore_eos`,
`repetition_penalty`, `stop_token_ids`, `skip_special_tokens`, `include_stop_str_in_output`.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

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
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logit_bias: dict[str, Any] | None = None
    best_of: int | None = None

    def unsupported(self) -> list[tuple[str, str]]:
        """(field, reason) for each set field this server cannot honour."""
        found = []
        if self.logit_bias:
            found.append(("logit_bias", "logit_bias is not supported"))
        if self.best_of not in (None, 1):
            found.append(("best_of", "best_of other than 1 is not supported"))
        return found


class CompletionRequest(_SamplingFields):
    """POST /v1/completions."""

    prompt: str | list[str] | TokenIds | list[TokenIds]
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    suffix: str | None = None

    def unsupported(self) -> list[tuple[str, str]]:
        found = super().unsupported()
        if self.echo:
            found.append(("echo", "echo is not supported"))
        if self.suffix:
            found.append(("suffix", "suffix is not supported"))
        return found


class TextPart(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(_SamplingFields):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    tools: list[Any] | None = None
    tool_choice: Any = None
    functions: list[Any] | None = None
    response_format: dict[str, Any] | None = None

    def unsupported(self) -> list[tuple[str, str]]:
        found = super().unsupported()
        for name in ("tools", "functions"):
            if getattr(self, name):
                found.append((name, f"{name} (tool calling) is not supported"))
        if self.response_format and self.response_format.get("type") not in (None, "text"):
            found.append(("response_format", "only response_format type 'text' is supported"))
        if self.top_logprobs and not self.logprobs:
            found.append(("top_logprobs", "top_logprobs requires logprobs to be true"))
        return found
