"""Tokenizer tests: ids equal transformers' tokenizers, chat templates render identically,
eos/bos ids come from the right files, and the jinja sandbox holds."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import tokenizers

from samebits.model import ModelLoadError, Tokenizer, load_model
from tiny_models import write_tiny_gguf

ARCH_FIXTURES = ["tiny_llama_dir", "tiny_qwen2_dir", "tiny_qwen3_dir", "tiny_mistral_dir"]
TEXTS = [
    "Hello world! The quick brown fox.",
    "12345",
    "Pi is 3.14159, year 2024",
    "def add(a, b):\n    return a + b\n",
    "Ünïcödé → 日本語 テキスト 😀",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "",
]
MESSAGES = [
    [{"role": "user", "content": "What is 2 + 2?"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Hi 😀"},
        {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Count: 1 2 3"},
    ],
]


def _hf_tokenizer(folder):
    """transformers' fast tokenizer over the folder's own tokenizer.json. (AutoTokenizer would
    pick Qwen2Tokenizer for model_type qwen2, which swaps in Qwen2's pre-tokenizer; the tiny
    checkpoints share one generic byte-level tokenizer.json, which the loader honours.)"""
    import transformers

    return transformers.PreTrainedTokenizerFast.from_pretrained(folder)


# --- HF folders -------------------------------------------------------------------------------


@pytest.mark.parametrize("fixture", ARCH_FIXTURES)
def test_ids_equal_transformers(fixture, request):
    folder = request.getfixturevalue(fixture)
    ours, reference = load_model(folder).tokenizer, _hf_tokenizer(folder)
    assert ours.vocab_size == len(reference)
    for text in TEXTS:
        for add_special in (False, True):
            expected = reference.encode(text, add_special_tokens=add_special)
            assert ours.encode(text, add_special_tokens=add_special) == expected, text


@pytest.mark.parametrize("fixture", ARCH_FIXTURES)
def test_chat_template_equals_transformers(fixture, request):
    folder = request.getfixturevalue(fixture)
    ours, reference = load_model(folder).tokenizer, _hf_tokenizer(folder)
    for messages in MESSAGES:
        for add_generation_prompt in (True, False):
            expected = reference.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt
            )
            assert ours.apply_chat_template(messages, add_generation_prompt) == expected


def test_round_trip(tiny_qwen3_dir):
    tokenizer = load_model(tiny_qwen3_dir).tokenizer
    for text in TEXTS:
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids, skip_special_tokens=False) == text


def test_skip_special_tokens(tiny_qwen3_dir):
    tokenizer = load_model(tiny_qwen3_dir).tokenizer
    ids = tokenizer.encode("<|im_start|>user\nhi<|im_end|>")
    assert tokenizer.decode(ids) == "user\nhi"
    assert tokenizer.decode(ids, skip_special_tokens=False) == "<|im_start|>user\nhi<|im_end|>"


def test_token_to_str_concatenates_to_ascii_text(tiny_llama_dir):
    tokenizer = load_model(tiny_llama_dir).tokenizer
    text = "The quick brown fox, 12345!"
    assert "".join(tokenizer.token_to_str(i) for i in tokenizer.encode(text)) == text
    assert tokenizer.token_to_str(tokenizer.encode("<|im_end|>")[0]) == "<|im_end|>"


@pytest.mark.parametrize("fixture", ARCH_FIXTURES)
def test_eos_ids_from_generation_config_then_tokenizer_config(fixture, request):
    folder = request.getfixturevalue(fixture)
    tokenizer = load_model(folder).tokenizer
    generation = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    eos_token = json.loads((folder / "tokenizer_config.json").read_text())["eos_token"]
    backend = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
    listed = generation if isinstance(generation, list) else [generation]
    expected = tuple(dict.fromkeys([*listed, backend.token_to_id(eos_token)]))
    assert tokenizer.eos_token_ids == expected
    assert tokenizer.bos_token_id is None


def test_qwen2_eos_list_has_several_ids(tiny_qwen2_dir):
    assert len(load_model(tiny_qwen2_dir).tokenizer.eos_token_ids) == 2


def test_ids_past_the_tokenizer_decode_to_nothing_negative_ids_rejected(tiny_llama_dir):
    tokenizer = load_model(tiny_llama_dir).tokenizer
    assert tokenizer.decode([0, tokenizer.vocab_size]) == tokenizer.decode([0])
    assert tokenizer.token_to_str(tokenizer.vocab_size + 5) == ""
    with pytest.raises(ValueError, match="negative"):
        tokenizer.decode([0, -1])
    with pytest.raises(ValueError, match="negative"):
        tokenizer.token_to_str(-1)


# --- chat template rules ------------------------------------------------------------------------


def _backend(tiny_llama_dir) -> tokenizers.Tokenizer:
    return tokenizers.Tokenizer.from_file(str(tiny_llama_dir / "tokenizer.json"))


def test_template_raise_exception(tiny_llama_dir):
    tokenizer = load_model(tiny_llama_dir).tokenizer
    with pytest.raises(ValueError, match="unknown role: tool"):
        tokenizer.apply_chat_template([{"role": "tool", "content": "x"}])


def test_no_template_is_a_clear_error(tiny_llama_dir):
    tokenizer = Tokenizer(_backend(tiny_llama_dir))
    with pytest.raises(ValueError, match="no chat template"):
        tokenizer.apply_chat_template([{"role": "user", "content": "hi"}])


@pytest.mark.parametrize("messages", [[], [{"content": "no role"}], "user: hi"])
def test_malformed_messages(tiny_llama_dir, messages):
    tokenizer = load_model(tiny_llama_dir).tokenizer
    with pytest.raises(ValueError, match="messages"):
        tokenizer.apply_chat_template(messages)


def test_template_sandbox_blocks_attribute_escape(tiny_llama_dir):
    template = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    tokenizer = Tokenizer(_backend(tiny_llama_dir), chat_template=template)
    with pytest.raises(ValueError, match="chat template failed"):
        tokenizer.apply_chat_template([{"role": "user", "content": "x"}])


def test_template_syntax_error(tiny_llama_dir):
    with pytest.raises(ValueError, match="syntax error"):
        Tokenizer(_backend(tiny_llama_dir), chat_template="{% for %}")


def test_template_has_no_clock_and_plain_tojson(tiny_llama_dir):
    template = (
        "{% if strftime_now is defined %}clock{% else %}fixed{% endif %}|"
        "{{ messages | tojson }}|{{ bos_token }}|{{ eos_token }}"
    )
    tokenizer = Tokenizer(
        _backend(tiny_llama_dir), chat_template=template, bos_token="<s>", eos_token="</s>"
    )
    messages = [{"role": "user", "content": "<b> & 'ü'"}]
    expected = f"fixed|{json.dumps(messages, ensure_ascii=False)}|<s>|</s>"
    assert tokenizer.apply_chat_template(messages) == expected


# --- GGUF ---------------------------------------------------------------------------------------


def test_tiny_gguf_tokenizer_equals_hf_folder(tiny_mistral_dir, tmp_path):
    from_gguf = load_model(write_tiny_gguf(tmp_path / "t.gguf", tiny_mistral_dir)).tokenizer
    from_folder = load_model(tiny_mistral_dir).tokenizer
    assert from_gguf.vocab_size == from_folder.vocab_size
    for text in TEXTS:
        assert from_gguf.encode(text) == from_folder.encode(text), text
    for messages in MESSAGES:
        assert from_gguf.apply_chat_template(messages) == from_folder.apply_chat_template(messages)
    eos, eot = from_folder.encode("<|im_end|>")[0], from_folder.encode("<|endoftext|>")[0]
    assert from_gguf.eos_token_ids == (eos, eot)
    assert from_gguf.bos_token_id == from_folder.encode("<|im_start|>")[0]


@pytest.mark.parametrize("pre", ["default", "llama-bpe"])
def test_tiny_gguf_ids_equal_transformers(tiny_mistral_dir, tmp_path, pre):
    import transformers

    path = write_tiny_gguf(tmp_path / "t.gguf", tiny_mistral_dir, pre=pre)
    ours = load_model(path).tokenizer
    reference = transformers.AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    for text in [*TEXTS, "a  12", "x = [1,  22, 333]\n\n\tend  "]:
        assert ours.encode(text) == reference.encode(text, add_special_tokens=False), text


def test_smollm2_ids_equal_transformers(smollm2_model, hf_smollm2_tokenizer):
    ours = smollm2_model.tokenizer
    assert ours.vocab_size == len(hf_smollm2_tokenizer)
    chat = ours.apply_chat_template(MESSAGES[1])
    for text in [*TEXTS, chat, "x = [1, 2, 3]\nprint(x[0])  # 0"]:
        expected = hf_smollm2_tokenizer.encode(text, add_special_tokens=False)
        assert ours.encode(text) == expected, text
        assert ours.encode(text, add_special_tokens=True) == hf_smollm2_tokenizer.encode(text)
        assert ours.decode(expected, skip_special_tokens=False) == text


def test_smollm2_splits_digits_like_its_tokenizer_json(smollm2_model, hf_smollm2_tokenizer):
    """SmolLM2's tokenizer.json (and llama.cpp's "smollm" pre-tokenizer) isolate digits before
    the byte-level split. transformers' GGUF converter has no "smollm" entry and skips the digit
    split, which changes ids only where whitespace runs precede a digit ("a  12"). The reference
    here is transformers' vocabulary and merges with SmolLM2's own pre-tokenizer."""
    reference = tokenizers.Tokenizer.from_str(hf_smollm2_tokenizer.backend_tokenizer.to_str())
    reference.pre_tokenizer = tokenizers.pre_tokenizers.Sequence(
        [
            tokenizers.pre_tokenizers.Digits(individual_digits=True),
            tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    for text in ["a  12", "x  3.14 and   42", "I'm  1st\t\t2nd\n\n 3rd", "[1,  2]"]:
        assert smollm2_model.tokenizer.encode(text) == reference.encode(text).ids, text


def test_smollm2_chat_template_equals_transformers(smollm2_model, hf_smollm2_tokenizer):
    for messages in MESSAGES:
        for add_generation_prompt in (True, False):
            expected = hf_smollm2_tokenizer.apply_chat_template(
                messages, tokenize=False, add_generation_prompt=add_generation_prompt
            )
            assert smollm2_model.tokenizer.apply_chat_template(messages, add_generation_prompt) == (
                expected
            )


def test_smollm2_special_ids_equal_transformers(smollm2_model, hf_smollm2_tokenizer):
    tokenizer = smollm2_model.tokenizer
    assert tokenizer.eos_token_ids == (hf_smollm2_tokenizer.eos_token_id,)
    assert tokenizer.bos_token_id == hf_smollm2_tokenizer.bos_token_id
    special = {
        hf_smollm2_tokenizer.convert_tokens_to_ids(t)
        for t in hf_smollm2_tokenizer.all_special_tokens
    }
    for token_id in special:
        assert tokenizer.decode([token_id]) == ""
        assert tokenizer.decode([token_id], skip_special_tokens=False) == tokenizer.token_to_str(
            token_id
        )


# --- bad tokenizer files ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "content", "reason"),
    [
        ("generation_config.json", {"eos_token_id": [2, 9999]}, "eos_token_id must be token ids"),
        ("generation_config.json", {"eos_token_id": "2"}, "eos_token_id must be token ids"),
        ("tokenizer_config.json", {"eos_token": "<nope>"}, "'<nope>' is not in the vocabulary"),
        ("chat_template.jinja", "{% if %}", "syntax error"),
        ("tokenizer.json", "{not json", "cannot parse tokenizer"),
    ],
)
def test_bad_tokenizer_files(tiny_mistral_dir, tmp_path, file, content, reason):
    folder = Path(shutil.copytree(tiny_mistral_dir, tmp_path / "m"))
    text = content if isinstance(content, str) else json.dumps(content)
    (folder / file).write_text(text, encoding="utf-8")
    with pytest.raises(ModelLoadError) as info:
        load_model(folder)
    assert str(folder / file) in str(info.value) and reason in str(info.value)
