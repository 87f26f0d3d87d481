"""Request bodies of the OpenAI-compatible API (pydantic, strict types).

Strict: a string where a number is expected, a float for an integer or 0/1 for a boolean is
a type error (HTTP 400), never coerced. Unknown fields are ignored, as most OpenAI-compatible
servers do; fields this server cannot honour (`tools`, `suffix`, `best_of` > 1, ...)
are rejected when set. Extensions beyond OpenAI (vLLM's names): `top_k`, `min_p`,
`min_tokens`, `ignore_eos`, `repetition_penalty`, `stop_token_ids`, `skip_special_tokens`,
`include_stop_str_in_output`. `logit_bias` values and keys are checked against the model in
`params.py` (the vocabulary size is not known here).
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
    min_tokens: int = Field(0, ge=0)
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
        if self.best_of not in (None, 1):
            found.append(("best_of", "best_of other than 1 is not supported"))
        return found


class CompletionRequest(_SamplingFields):
    """POST /v1/completions."""

    prompt: str | list[str] | TokenIds | list[TokenIds]
    max_tokens: int | None = Field(None, ge=0)  # 0: score the prompt only (with echo)
    logprobs: int | None = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    suffix: str | None = None
    prompt_logprobs: int | None = None

    def unsupported(self) -> list[tuple[str, str]]:
        found = super().unsupported()
        if self.max_tokens == 0 and not self.echo:
            found.append(("max_tokens", "max_tokens 0 is only allowed with echo (prompt scoring)"))
        if self.prompt_logprobs is not None:
            found.append(
                ("prompt_logprobs", "prompt_logprobs is not supported here; use echo with logprobs")
            )
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
