"""Grammar engines on CPU (issue 10.9): compile time and per-token mask time on SmolLM2.

For each engine that imports (llguidance, xgrammar, outlines-core), on the embedded SmolLM2
tokenizer (49,152 ids): compile a JSON schema (and, where the engine can, "any JSON object"
and a regex), then walk a valid document token by token: compute the allowed-token mask for
the prefix, check the document's next token is allowed, advance. Reports the compile time and
the median / p90 / max / mean mask time per token, and the one-off setup of the engine's
tokenizer view. The "samebits" rows time what the engine adds per guided token: llguidance's
mask through `GrammarMatcher.allowed()` (bits -> bool array) plus `processed_logits` with
that mask on a 49,152-wide float32 row (a free row's `processed_logits` is not subtracted) (one thread, wall clock, `perf_counter`).

The engines need not be installed in the venv: put them on PYTHONPATH, e.g.

    pip install --no-deps --target /tmp/gram/llguidance llguidance
    PYTHONPATH=src:/tmp/gram/llguidance python benchmarks/grammar_engines.py
"""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "city": {"enum": ["Paris", "Berlin", "Madrid", "Rome"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "scores": {"type": "array", "items": {"type": "number"}},
    },
    "required": ["name", "age", "city", "tags", "scores"],
    "additionalProperties": False,
}
DOCUMENT = {
    "name": "Ada Lovelace, who wrote the first published program for a computing engine",
    "age": 36,
    "city": "Paris",
    "tags": ["mathematics", "analytical engine", "notes", "Bernoulli numbers", "poetry"],
    "scores": [1.5, 2.25, 3.0, 42, -7.125, 1e3],
}
REGEX = r"[0-9]{3}-[0-9]{4} [A-Z][a-z]+( [A-Z][a-z]+)*"
REGEX_TEXT = "555-0199 Grace Brewster Murray Hopper"


def smollm2_tokenizer():
    from gguf import GGUFReader

    from samebits.model.gguf_loader import gguf_tokenizer
    from samebits.model.loader import default_model_path

    path = default_model_path()
    return gguf_tokenizer(GGUFReader(path), path)


def walk(mask_fn: Callable[[], Callable[[int], bool]], advance: Callable[[int], None], ids):
    """Mask times (s) over `ids`; `mask_fn()` computes the mask, returns a membership test."""
    times = []
    for token in ids:
        start = time.perf_counter()
        allowed = mask_fn()
        times.append(time.perf_counter() - start)
        if not allowed(token):
            raise AssertionError(f"token {token} of the document is masked")
        advance(token)
    return times


def llguidance_case(tok, kind: str):
    import llguidance
    import numpy as np

    setup = time.perf_counter()
    lltok = llguidance.LLTokenizer(
        tok.backend.to_str(), n_vocab=tok.vocab_size, eos_token=list(tok.eos_token_ids)
    )
    grammar = {
        "schema": lambda: llguidance.LLMatcher.grammar_from_json_schema(SCHEMA),
        "object": lambda: llguidance.LLMatcher.grammar_from_json_schema({"type": "object"}),
        "regex": lambda: llguidance.LLMatcher.grammar_from_regex(REGEX),
    }[kind]()
    start = time.perf_counter()
    setup_s = start - setup
    matcher = llguidance.LLMatcher(lltok, grammar)
    compile_s = time.perf_counter() - start
    assert not matcher.is_error(), matcher.get_error()
    mask = np.zeros((tok.vocab_size + 31) // 32, dtype=np.int32)

    def compute():
        matcher.unsafe_compute_mask_ptr(mask.ctypes.data, mask.nbytes)
        return lambda t: bool((int(mask[t // 32]) >> (t % 32)) & 1)

    return setup_s, compile_s, compute, lambda t: matcher.consume_token(t)


def samebits_case(tok, kind: str):
    """llguidance through samebits' own wrapper (`GrammarMatcher.allowed()`: the mask as a
    bool array, what the sampler receives), plus the sampler's masking of a float32 row."""
    import numpy as np

    from samebits.sampling import SamplingParams, processed_logits
    from samebits.structured import StructuredOutputsParams
    from samebits.structured.matcher import GrammarMatcher, GrammarTokenizer

    fields = {
        "schema": {"json": SCHEMA},
        "object": {"json_object": True},
        "regex": {"regex": REGEX},
    }
    setup = time.perf_counter()
    view = GrammarTokenizer(tok, tok.vocab_size)
    start = time.perf_counter()
    setup_s = start - setup
    matcher = GrammarMatcher(view, StructuredOutputsParams(**fields[kind]))
    compile_s = time.perf_counter() - start
    row = np.random.default_rng(0).standard_normal(tok.vocab_size).astype(np.float32)
    params = SamplingParams()

    def compute():
        allowed = matcher.allowed()
        processed_logits(row, params, 0, [1], [], (), allowed)
        return lambda t: bool(allowed[t])

    return setup_s, compile_s, compute, matcher.accept


def xgrammar_case(tok, kind: str):
    import transformers
    import xgrammar as xgr

    setup = time.perf_counter()
    hf = transformers.PreTrainedTokenizerFast(tokenizer_object=tok.backend)
    info = xgr.TokenizerInfo.from_huggingface(
        hf, vocab_size=tok.vocab_size, stop_token_ids=list(tok.eos_token_ids)
    )
    compiler = xgr.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    start = time.perf_counter()
    setup_s = start - setup
    compiled = {
        "schema": lambda: compiler.compile_json_schema(json.dumps(SCHEMA)),
        "object": lambda: compiler.compile_builtin_json_grammar(),
        "regex": lambda: compiler.compile_regex(REGEX),
    }[kind]()
    compile_s = time.perf_counter() - start
    matcher = xgr.GrammarMatcher(compiled)
    bitmask = xgr.allocate_token_bitmask(1, tok.vocab_size)

    def compute():
        matcher.fill_next_token_bitmask(bitmask)
        row = bitmask[0]
        return lambda t: bool((int(row[t // 32]) >> (t % 32)) & 1)

    return setup_s, compile_s, compute, lambda t: matcher.accept_token(t)


def outlines_core_case(tok, kind: str):
    import numpy as np
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    from samebits.model.tokenizer import _bytes_to_unicode

    if kind == "object":
        raise NotImplementedError("no grammar for arbitrary JSON (regular languages only)")
    setup = time.perf_counter()
    eos = tok.eos_token_ids[0]
    inverse = {char: byte for byte, char in _bytes_to_unicode().items()}
    by_bytes: dict[bytes, list[int]] = {}
    for token in range(tok.vocab_size):
        if token in tok.eos_token_ids:
            continue
        by_bytes.setdefault(_token_bytes(tok, token, inverse), []).append(token)
    vocabulary = Vocabulary(eos, by_bytes)
    regex = build_regex_from_schema(json.dumps(SCHEMA)) if kind == "schema" else REGEX
    start = time.perf_counter()
    setup_s = start - setup
    guide = Guide(Index(regex, vocabulary))
    compile_s = time.perf_counter() - start

    mask = np.zeros((tok.vocab_size + 31) // 32, dtype=np.int32)

    def compute():
        guide.write_mask_into(mask.ctypes.data, mask.size, mask.itemsize)
        return lambda t: bool((int(mask[t // 32]) >> (t % 32)) & 1)

    return setup_s, compile_s, compute, lambda t: guide.advance(t)


def _token_bytes(tok, token: int, inverse: dict[str, int]) -> bytes:
    piece = tok.backend.id_to_token(token)
    if all(char in inverse for char in piece):
        return bytes(inverse[char] for char in piece)
    return piece.encode()


def document_ids(tok, kind: str) -> list[int]:
    if kind == "regex":
        return tok.encode(REGEX_TEXT)
    return tok.encode(json.dumps(DOCUMENT, separators=(",", ":")))


def summary(name: str, kind: str, setup_s: float, compile_s: float, times: list[float]) -> dict:
    ordered = sorted(times)
    us = lambda s: round(s * 1e6, 1)  # noqa: E731
    return {
        "engine": name,
        "grammar": kind,
        "tokens": len(times),
        "tokenizer_setup_ms": round(setup_s * 1e3, 1),
        "compile_ms": round(compile_s * 1e3, 2),
        "mask_us_median": us(statistics.median(ordered)),
        "mask_us_p90": us(ordered[int(0.9 * (len(ordered) - 1))]),
        "mask_us_max": us(ordered[-1]),
        "mask_us_mean": us(statistics.fmean(ordered)),
    }


def main() -> None:
    tok = smollm2_tokenizer()
    print(json.dumps({"python": platform.python_version(), "vocab": tok.vocab_size}))
    cases = {
        "llguidance": llguidance_case,
        "samebits (llguidance + bool mask + masked row)": samebits_case,
        "xgrammar": xgrammar_case,
        "outlines-core": outlines_core_case,
    }
    for name, case in cases.items():
        for kind in ("schema", "object", "regex"):
            try:
                setup_s, compile_s, compute, advance = case(tok, kind)
            except (ImportError, NotImplementedError) as exc:
                print(json.dumps({"engine": name, "grammar": kind, "skipped": str(exc)}))
                continue
            times = walk(compute, advance, document_ids(tok, kind))
            print(json.dumps(summary(name, kind, setup_s, compile_s, times)))


if __name__ == "__main__":
    main()
