"""llama.cpp through llama-cpp-python's low-level API, for benchmarks/cpu_vs_llamacpp.py.

Greedy generation of exactly `max_tokens` tokens per sequence (EOS ignored), any number of
sequences at once: all prompts go through `llama_decode` in batches of `n_batch` tokens (each
sequence's last prompt token asks for logits), then every step decodes one token per sequence
in one batch (llama.cpp's multi-sequence batch API, as its server's parallel slots use it).
Weights are read into process memory (no mmap). The next token is the argmax of the sequence's logits row (numpy over llama.cpp's own buffer:
the cheapest greedy pick). The KV memory is cleared before each generation (no prefix reuse).

Install (not a test dependency; built from source, 40+ min at nice 19 on 2 busy cores):
    CMAKE_ARGS="-DGGML_NATIVE=ON" nice -n 19 pip install --no-binary llama-cpp-python \
        llama-cpp-python==0.3.36
The package's low-level module loads libllama from $LLAMA_CPP_LIB_PATH when set (e.g. the
build directory's bin/ of an unfinished wheel build: libllama and libggml are built first).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True)
class Generation:
    """Wall time of one generation, time to the first token of every sequence (the prefill),
    and each sequence's tokens."""

    wall_s: float
    ttft_s: float
    token_ids: list[list[int]]


class LlamaCpp:
    """One llama.cpp context over a GGUF file: `n_seq_max` sequences of up to
    `n_ctx / n_seq_max` positions each (or a shared pool with `kv_unified`)."""

    def __init__(
        self, path: Path, threads: int, n_seq_max: int, n_ctx: int, kv_unified: bool,
        n_batch: int = 2048, n_ubatch: int = 512,
    ):  # fmt: skip
        import llama_cpp as lc

        self.lc = lc
        lc.llama_backend_init()
        model_params = lc.llama_model_default_params()
        # Weights in process memory: a mapped file's pages can be evicted under memory
        # pressure and re-read every token (seen on the shared machine: 0.7 tok/s).
        model_params.use_mmap = False
        self.model = lc.llama_model_load_from_file(str(path).encode(), model_params)
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        params = lc.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = n_ctx, n_batch, n_ubatch
        params.n_seq_max, params.kv_unified = n_seq_max, kv_unified
        params.n_threads = params.n_threads_batch = threads
        self.ctx = lc.llama_init_from_model(self.model, params)
        if not self.ctx:
            raise RuntimeError("llama.cpp could not create the context")
        self.n_batch, self.n_seq_max = n_batch, n_seq_max
        self.batch = lc.llama_batch_init(max(n_batch, n_seq_max), 0, n_seq_max)
        self.vocab = lc.llama_vocab_n_tokens(lc.llama_model_get_vocab(self.model))
        self.describe = (
            f"llama.cpp (llama-cpp-python {lc.__version__}, libraries from "
            f"{os.environ.get('LLAMA_CPP_LIB_PATH') or 'its wheel'}), n_threads={threads}, "
            f"n_seq_max={n_seq_max}, n_ctx={n_ctx}, kv_unified={kv_unified}, "
            f"n_batch={n_batch}, n_ubatch={n_ubatch}, flash_attn_type={params.flash_attn_type}"
        )

    def close(self) -> None:
        self.lc.llama_batch_free(self.batch)
        self.lc.llama_free(self.ctx)
        self.lc.llama_model_free(self.model)

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> None:
        """One llama_decode of (token, position, sequence, wants logits) items."""
        b = self.batch
        b.n_tokens = len(items)
        for i, (token, pos, seq, logits) in enumerate(items):
            b.token[i], b.pos[i], b.n_seq_id[i] = token, pos, 1
            b.seq_id[i][0], b.logits[i] = seq, logits
        rc = self.lc.llama_decode(self.ctx, b)
        if rc != 0:
            raise RuntimeError(f"llama_decode returned {rc}")

    def _argmax(self, index: int) -> int:
        row = self.lc.llama_get_logits_ith(self.ctx, index)
        return int(np.ctypeslib.as_array(row, shape=(self.vocab,)).argmax())

    def generate(self, prompts: list[list[int]], max_tokens: int) -> Generation:
        if len(prompts) > self.n_seq_max:
            raise ValueError(f"{len(prompts)} prompts, the context holds {self.n_seq_max}")
        self.lc.llama_memory_clear(self.lc.llama_get_memory(self.ctx), True)
        start = time.perf_counter()
        outputs: list[list[int]] = [[] for _ in prompts]
        items = [
            (token, pos, seq, pos == len(p) - 1)
            for seq, p in enumerate(prompts)
            for pos, token in enumerate(p)
        ]
        for at in range(0, len(items), self.n_batch):
            chunk = items[at : at + self.n_batch]
            self._decode(chunk)
            for i, (_, _, seq, logits) in enumerate(chunk):
                if logits:
                    outputs[seq].append(self._argmax(i))
        ttft = time.perf_counter() - start
        for step in range(1, max_tokens):
            self._decode(
                [
                    (out[-1], len(p) + step - 1, s, True)
                    for s, (p, out) in enumerate(zip(prompts, outputs, strict=True))
                ]
            )
            for s, out in enumerate(outputs):
                out.append(self._argmax(s))
        return Generation(time.perf_counter() - start, ttft, outputs)
