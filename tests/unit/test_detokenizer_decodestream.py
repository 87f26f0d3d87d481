"""`IncrementalDetokenizer` against the tokenizers library's own `DecodeStream`.

Step by step, both release the same text on the corpus below (byte-level BPE, Metaspace BPE
with a special `<unk>`, the tiny models' tokenizer and SmolLM2's; encoded texts, random id
sequences, sequences dense in special tokens; special tokens skipped and kept). They differ
at the end: `DecodeStream` has no flush, so bytes of an incomplete UTF-8 character at the
end of an output are never released and its text is not `tokenizer.decode(ids)`; that is why
the engine keeps `IncrementalDetokenizer` (docs/server.md, "Detokenization").
"""

from __future__ import annotations

import random

import pytest
from tokenizers import Tokenizer
from tokenizers.decoders import DecodeStream

from samebits.detokenizer import REPLACEMENT_CHAR, IncrementalDetokenizer
from tiny_models import byte_bpe_tokenizer, metaspace_bpe_tokenizer, train_tiny_tokenizer

TEXTS = [
    "Hello wörld 😀 日本語 the end",
    "the quick brown fox jumps over the lazy dog",
    " leading space",
    "  two  spaces\n\nnewlines\t tab",
    "ok 😀",
    "ﬁ ligature, Ω, 𝔘𝔫𝔦𝔠𝔬𝔡𝔢",
    "<|im_start|>user\nhi<|im_end|>",
]


def _cases(tokenizer: Tokenizer, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    vocab = tokenizer.get_vocab_size()
    specials = [i for i in range(vocab) if (tokenizer.id_to_token(i) or "").startswith("<")][:20]
    cases = [tokenizer.encode(text).ids for text in TEXTS]
    cases += [[rng.randrange(vocab) for _ in range(rng.randrange(1, 30))] for _ in range(150)]
    dense = specials + [rng.randrange(vocab) for _ in range(3)]
    cases += [[rng.choice(dense) for _ in range(10)] for _ in range(50)]
    return cases


def _both(tokenizer: Tokenizer, ids: list[int], skip: bool) -> tuple[list[str], list[str], str]:
    ours = IncrementalDetokenizer(tokenizer, skip)
    theirs = DecodeStream(skip_special_tokens=skip)
    mine = [ours.append(t) for t in ids]
    library = [theirs.step(tokenizer, t) or "" for t in ids]
    return mine, library, ours.flush()


@pytest.fixture(scope="module")
def tokenizers_under_test(smollm2_model) -> dict[str, Tokenizer]:
    return {
        "byte_bpe": byte_bpe_tokenizer(),
        "metaspace": metaspace_bpe_tokenizer(),
        "tiny": train_tiny_tokenizer(),
        "smollm2": smollm2_model.tokenizer.backend,
    }


@pytest.mark.parametrize("skip", [True, False])
@pytest.mark.parametrize("name", ["byte_bpe", "metaspace", "tiny", "smollm2"])
def test_each_step_releases_what_decode_stream_releases(tokenizers_under_test, name, skip):
    tokenizer = tokenizers_under_test[name]
    for ids in _cases(tokenizer):
        mine, library, tail = _both(tokenizer, ids, skip)
        assert mine == library, ids
        assert "".join(mine) + tail == tokenizer.decode(ids, skip_special_tokens=skip), ids


def test_decode_stream_never_releases_an_incomplete_tail():
    """The counterexample: "ok 😀" without the emoji's last byte. decode() and our flush give
    the trailing U+FFFD; DecodeStream's steps stop before it, and it has no flush."""
    tokenizer = byte_bpe_tokenizer()
    ids = tokenizer.encode("ok 😀").ids[:-1]  # the emoji without its last byte
    mine, library, tail = _both(tokenizer, ids, skip=True)
    full = tokenizer.decode(ids)
    assert full == "ok " + REPLACEMENT_CHAR  # the example in docs/server.md
    assert "".join(mine) + tail == full
    assert "".join(library) == "".join(mine) == "ok "


def test_a_skipped_special_token_does_not_eat_the_next_space():
    """Metaspace strips the space of a window's first token: a window must not restart at a
    token that decodes to nothing (the rule DecodeStream follows; this detokenizer once did
    not, and lost the space after a skipped `<unk>`)."""
    tokenizer = metaspace_bpe_tokenizer()
    unk = tokenizer.token_to_id("<unk>")
    ids = tokenizer.encode("the fox").ids
    ids = ids[:1] + [unk] + ids[1:]
    detok = IncrementalDetokenizer(tokenizer, skip_special_tokens=True)
    text = "".join(detok.append(t) for t in ids) + detok.flush()
    assert text == tokenizer.decode(ids, skip_special_tokens=True) == "the fox"
