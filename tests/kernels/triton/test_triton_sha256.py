"""The GPU SHA-256 kernel on the CPU interpreter: each row's digest equals hashlib's of the
row's canonical bytes (`logits_digest`), for every tail length of the last block (one or two
padding blocks), rows of special values, and more rows than one program holds; the constants
are FIPS 180-4's."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from samebits.kernels.triton.sha256 import hex_digests, sha256_constants, sha256_rows
from samebits.outputs import logits_digest


def _rows(n: int, words: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = rng.standard_normal((n, words)).astype(np.float32)
    specials = np.array([np.nan, -0.0, np.inf, -np.inf, 0.0, 1e-45], dtype=np.float32)
    rows[0, : min(words, len(specials))] = specials[: min(words, len(specials))]
    return rows


@pytest.mark.parametrize("words", [1, 13, 14, 15, 16, 29, 30, 31, 32, 53])
def test_digests_equal_hashlib_for_every_tail(words):
    rows = _rows(3, words, words)
    got = hex_digests(sha256_rows(torch.from_numpy(rows)).numpy())
    assert got == [logits_digest(row) for row in rows]
    assert got[1] == hashlib.sha256(rows[1].astype("<f4").tobytes()).hexdigest()


@pytest.mark.parametrize("per_program", [32, 64, 128])
def test_more_rows_than_one_program_and_a_strided_batch(per_program):
    """Rows spread over one or more programs (the last one part full) hash the same."""
    rows = _rows(70, 20, 1)
    wide = np.zeros((70, 24), dtype=np.float32)
    wide[:, :20] = rows
    got = hex_digests(sha256_rows(torch.from_numpy(wide)[:, :20], per_program).numpy())
    assert got == [logits_digest(row) for row in rows]


def test_constants_are_the_standard_ones():
    c = sha256_constants().view(np.uint32)
    assert (c[0], c[63], c[64], c[71], c[72]) == (
        0x428A2F98, 0xC67178F2, 0x6A09E667, 0x5BE0CD19, 0x80000000,
    )  # fmt: skip


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="float32"):
        sha256_rows(torch.zeros((2, 4), dtype=torch.float64))
