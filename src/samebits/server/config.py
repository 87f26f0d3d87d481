"""Frozen settings of the HTTP server (the engine has its own EngineConfig)."""

from __future__ import annotations

from dataclasses import dataclass

from samebits.tools.parsers import PARSERS

DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
# Seconds an idle HTTP keep-alive connection stays open. It must outlast the clients' own
# idle expiry (httpx, so the OpenAI SDK: 5 s): uvicorn's default is also 5 s, and a client
# reusing a connection the server is closing at that instant gets a read error on its request
# (seen once in 592 streamed requests of benchmarks/server_rate_sweep.py on 2026-12-01).
DEFAULT_TIMEOUT_KEEP_ALIVE_S = 65


@dataclass(frozen=True)
class ServerConfig:
    """Limits and identity of the API. Invariant: every limit is a positive integer.

    `model_names` are the names `/v1/models` lists and requests may ask for (the first is
    reported back). `max_tokens_limit` caps `max_tokens` (None: only the context length does).
    `api_key` set: every route except `/health` needs `Authorization: Bearer <api_key>`.
    `tool_call_parser` names the tool-call parser (`samebits.tools.parsers.PARSERS`; None:
    the model family's default, if it has one).
    """

    model_names: tuple[str, ...]
    api_key: str | None = None
    max_n: int = 16
    max_prompts: int = 64
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    default_completion_max_tokens: int = 16
    max_tokens_limit: int | None = None
    tool_call_parser: str | None = None

    def __post_init__(self) -> None:
        if not self.model_names or not all(isinstance(m, str) and m for m in self.model_names):
            raise ValueError(f"model_names must be non-empty strings, got {self.model_names!r}")
        for name in ("max_n", "max_prompts", "max_body_bytes", "default_completion_max_tokens"):
            _require_positive(name, getattr(self, name))
        if self.max_tokens_limit is not None:
            _require_positive("max_tokens_limit", self.max_tokens_limit)
        if self.tool_call_parser is not None and self.tool_call_parser not in PARSERS:
            raise ValueError(
                f"unknown tool-call parser {self.tool_call_parser!r}; known: {', '.join(PARSERS)}"
            )
        if self.api_key is not None and not self.api_key:
            raise ValueError("api_key must be a non-empty string or None")

    @property
    def model_name(self) -> str:
        return self.model_names[0]


def _require_positive(name: str, value: object) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"ServerConfig.{name} must be a positive integer, got {value!r}")
