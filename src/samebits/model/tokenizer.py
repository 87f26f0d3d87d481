"""Tokenizer: a `tokenizers` backend plus the model's chat template and end-of-sequence ids.

The HF loader builds the backend from `tokenizer.json`; the GGUF loader builds a byte-level BPE
backend from GGUF metadata with `byte_level_bpe`. Chat templates render in a sandboxed jinja2
environment; `strftime_now` is deliberately not provided, so a template's output never depends
on the wall clock (templates that test `strftime_now is defined` fall back to their fixed date).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jinja2
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _gpt2_split() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2_split() -> pre_tokenizers.PreTokenizer:
    digits = pre_tokenizers.Digits(individual_digits=True)
    return pre_tokenizers.Sequence([digits, _gpt2_split()])


def _llama3_split() -> pre_tokenizers.PreTokenizer:
    split = pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    return pre_tokenizers.Sequence([split, byte_level])


# tokenizer.ggml.pre -> pre-tokenizer. "smollm" (like starcoder) isolates every digit before the
# GPT-2 split, as SmolLM2's own tokenizer.json (Digits) and llama.cpp do.
PRE_TOKENIZERS: dict[str, Callable[[], pre_tokenizers.PreTokenizer]] = {
    "default": _gpt2_split,
    "gpt2": _gpt2_split,
    "smollm": _digits_then_gpt2_split,
    "starcoder": _digits_then_gpt2_split,
    "llama-bpe": _llama3_split,
    "llama3": _llama3_split,
}


class Tokenizer:
    """Text <-> token ids, chat template rendering, and the ids that end generation.

    Invariants: `eos_token_ids` and `bos_token_id` are ids below `vocab_size`;
    `decode(encode(text)) == text` for byte-level BPE backends. An id at or past `vocab_size`
    (a checkpoint whose embedding is padded past its tokenizer) decodes to "" and is kept in
    the output ids: it never fails a request. Negative ids are refused.
    """

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        chat_template: str | None = None,
        eos_token_ids: Sequence[int] = (),
        bos_token_id: int | None = None,
        bos_token: str | None = None,
        eos_token: str | None = None,
    ) -> None:
        self._backend = backend
        self.vocab_size: int = backend.get_vocab_size(with_added_tokens=True)
        self.eos_token_ids: tuple[int, ...] = tuple(dict.fromkeys(int(i) for i in eos_token_ids))
        self.bos_token_id: int | None = bos_token_id
        self.bos_token = bos_token
        self.eos_token = eos_token
        self.chat_template = chat_template
        for token_id in self.eos_token_ids:
            self._check_id(token_id)
        if bos_token_id is not None:
            self._check_id(bos_token_id)
        self._template = None if chat_template is None else _compile_template(chat_template)

    @property
    def backend(self) -> tokenizers.Tokenizer:
        """The underlying `tokenizers.Tokenizer` (read-only use)."""
        return self._backend

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of `text`. Special-token strings in `text` map to their ids;
        `add_special_tokens` adds what the tokenizer's post-processor adds (e.g. BOS)."""
        if not isinstance(text, str):
            raise TypeError(f"encode: text must be a str, got {type(text).__name__}")
        return self._backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids`; ids past the tokenizer add "" (vLLM's rule); raises `ValueError`
        for a negative id."""
        known = [i for i in (int(t) for t in ids) if self._known(i)]
        return self._backend.decode(known, skip_special_tokens=skip_special_tokens)

    def token_to_str(self, token_id: int) -> str:
        """Display text of one token (special tokens included; a partial UTF-8 byte shows as
        U+FFFD; "" for an id past the tokenizer)."""
        if not self._known(int(token_id)):
            return ""
        return self._backend.decode([int(token_id)], skip_special_tokens=False)

    def apply_chat_template(self, messages: list[dict], add_generation_prompt: bool = True) -> str:
        """Render `messages` (dicts with a str `role`) with the model's chat template.

        Raises `ValueError` when the model has no template, a message is malformed, or the
        template itself raises (`raise_exception`) or fails to render.
        """
        if self._template is None:
            raise ValueError("this model has no chat template; send a plain prompt instead")
        _check_messages(messages)
        try:
            return self._template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "",
                eos_token=self.eos_token or "",
            )
        except jinja2.TemplateError as exc:
            raise ValueError(f"chat template failed: {exc}") from None

    def _known(self, token_id: int) -> bool:
        """Whether the tokenizer has a text for `token_id`; raises for a negative id."""
        if token_id < 0:
            raise ValueError(f"token id {token_id} is negative")
        return token_id < self.vocab_size

    def _check_id(self, token_id: int) -> None:
        if not 0 <= int(token_id) < self.vocab_size:
            raise ValueError(f"token id {token_id} is outside [0, {self.vocab_size})")


class _ChatTemplateError(jinja2.TemplateError):
    """Raised by a template's own `raise_exception(message)`."""


def _raise_exception(message: str) -> None:
    raise _ChatTemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # jinja's built-in tojson HTML-escapes; chat templates expect plain JSON.
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    try:
        return env.from_string(source)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"chat template has a syntax error on line {exc.lineno}: {exc}") from None


def _check_messages(messages: object) -> None:
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping) or not isinstance(message.get("role"), str):
            raise ValueError(f"messages[{index}] must be a dict with a str 'role'")


def byte_level_bpe(
    tokens: Sequence[str],
    merges: Sequence[str],
    *,
    pre_tokenizer: str,
    special_ids: Sequence[int] = (),
    user_defined_ids: Sequence[int] = (),
    bos_id: int | None = None,
) -> tokenizers.Tokenizer:
    """A byte-level BPE backend from a vocabulary listed by id and `"left right"` merges.

    `pre_tokenizer` names the splitting rule (a key of `PRE_TOKENIZERS`); `special_ids` become
    special added tokens (matched whole, skipped by `skip_special_tokens`), `user_defined_ids`
    plain added tokens; `bos_id` set means `add_special_tokens=True` prepends it.
    Raises `ValueError` for an unknown pre-tokenizer or malformed merges.
    """
    if pre_tokenizer not in PRE_TOKENIZERS:
        raise ValueError(
            f"pre-tokenizer {pre_tokenizer!r} is not supported (supported: {sorted(PRE_TOKENIZERS)})"
        )
    spelled = [_byte_level_spelling(token) for token in tokens]
    vocab = {token: index for index, token in enumerate(spelled)}
    backend = tokenizers.Tokenizer(
        models.BPE(vocab=vocab, merges=_split_merges(merges), fuse_unk=False)
    )
    backend.pre_tokenizer = PRE_TOKENIZERS[pre_tokenizer]()
    backend.decoder = decoders.ByteLevel()
    _add_tokens(backend, tokens, special_ids, user_defined_ids)
    if bos_id is not None:
        bos = tokens[bos_id]
        backend.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, bos_id)]
        )
    return backend


_BYTE_ALPHABET = frozenset(pre_tokenizers.ByteLevel.alphabet())


def _byte_level_spelling(token: str) -> str:
    """A token in the byte-level alphabet (tokens a converter wrote as raw text get respelled)."""
    if set(token) <= _BYTE_ALPHABET:
        return token
    table = _bytes_to_unicode()
    return "".join(table[byte] for byte in token.encode("utf-8"))


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table."""
    printable = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    table = {byte: chr(byte) for byte in printable}
    shift = 0
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + shift)
            shift += 1
    return table


def _split_merges(merges: Sequence[str]) -> list[tuple[str, str]]:
    pairs = []
    for index, merge in enumerate(merges):
        parts = merge.split(" ")
        if len(parts) != 2:
            raise ValueError(f"merge {index} ({merge!r}) is not two space-separated tokens")
        pairs.append((parts[0], parts[1]))
    return pairs


def _add_tokens(
    backend: tokenizers.Tokenizer,
    tokens: Sequence[str],
    special_ids: Sequence[int],
    user_defined_ids: Sequence[int],
) -> None:
    # A "special" token outside the byte alphabet would be a new id, not the listed one: skip it.
    special = [tokens[i] for i in special_ids if set(tokens[i]) <= _BYTE_ALPHABET]
    backend.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    user = [tokens[i] for i in user_defined_ids if set(tokens[i]) <= _BYTE_ALPHABET]
    backend.add_tokens([AddedToken(t, special=False, normalized=False) for t in user])
