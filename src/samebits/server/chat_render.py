"""Rendering a chat with tools through the model's own chat template.

`Tokenizer.apply_chat_template` renders messages only; HF templates also read `tools` (the
list of `{"type": "function", "function": {...}}`). This renders the same template source,
compiled the same way (the tokenizer's sandboxed environment), with `tools` added. A
template that never mentions `tools` cannot show them to the model: that is logged (once
per template), and the request goes on, as in vLLM and transformers.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from typing import Any

import jinja2

from samebits.model.tokenizer import _compile_template

logger = logging.getLogger("samebits.server")


def render_chat(
    tokenizer: Any, messages: list[dict], add_generation_prompt: bool, tools: list[dict] | None
) -> str:
    """The prompt text; ValueError when the template is missing or fails."""
    if not tools:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt)
    source = getattr(tokenizer, "chat_template", None)
    if source is None:
        raise ValueError("this model has no chat template; send a plain prompt instead")
    template = _compiled(source)
    if "tools" not in source:
        _warn_once(hashlib.sha256(source.encode()).hexdigest()[:12])
    try:
        return template.render(
            messages=messages, tools=tools, add_generation_prompt=add_generation_prompt,
            bos_token=tokenizer.bos_token or "", eos_token=tokenizer.eos_token or "",
        )  # fmt: skip
    except jinja2.TemplateError as exc:
        raise ValueError(f"chat template failed: {exc}") from None
    except TypeError as exc:  # e.g. a template adding a string to None
        raise ValueError(f"chat template failed: {exc}") from None


@functools.lru_cache(maxsize=8)
def _compiled(source: str) -> jinja2.Template:
    return _compile_template(source)


@functools.lru_cache(maxsize=64)
def _warn_once(template_hash: str) -> None:
    logger.warning(
        "the chat template (sha256 %s...) does not render 'tools': the model is not shown the "
        "tools of requests that send them",
        template_hash,
    )
