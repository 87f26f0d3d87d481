"""Chained block hashes: encoding, chaining over the whole prefix, salt, process stability."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from samebits.engine.prefix_hash import (
    BlockHash,
    compute_block_hashes,
    extend_block_hashes,
    hash_block_tokens,
    root_digest,
)

SRC = Path(__file__).resolve().parents[2] / "src"


def _manual_chain(tokens: list[int], block_size: int, salt: bytes) -> list[bytes]:
    """The documented encoding, written out independently."""
    prev = hashlib.sha256(
        b"samebits.prefix_hash.v1\x00" + len(salt).to_bytes(8, "little") + salt
    ).digest()
    out = []
    for start in range(0, len(tokens) - block_size + 1, block_size):
        block = tokens[start : start + block_size]
        payload = len(block).to_bytes(8, "little") + b"".join(struct.pack("<q", t) for t in block)
        prev = hashlib.sha256(prev + payload).digest()
        out.append(prev)
    return out


def test_digests_follow_the_documented_encoding() -> None:
    tokens = [5, 0, 2**40, 7, 9, 11, 13]
    hashes = compute_block_hashes(tokens, 3, b"salt")
    assert [h.digest for h in hashes] == _manual_chain(tokens, 3, b"salt")
    assert [h.token_ids for h in hashes] == [(5, 0, 2**40), (7, 9, 11)]


def test_partial_block_has_no_hash() -> None:
    assert compute_block_hashes([1, 2, 3], 4, b"") == []
    assert len(compute_block_hashes([1, 2, 3, 4, 5], 2, b"")) == 2


def test_digest_depends_on_every_earlier_token() -> None:
    a = compute_block_hashes([1, 2, 3, 4], 2, b"")
    b = compute_block_hashes([9, 2, 3, 4], 2, b"")
    assert a[1].token_ids == b[1].token_ids
    assert a[1].digest != b[1].digest
    assert a[1] != b[1]


def test_salt_separates_deployments() -> None:
    assert compute_block_hashes([1, 2], 2, b"model-a") != compute_block_hashes([1, 2], 2, b"b")
    assert root_digest(b"x") != root_digest(b"y")


def test_salt_must_be_bytes() -> None:
    with pytest.raises(ValueError, match="cache_salt"):
        root_digest("text")  # type: ignore[arg-type]


def test_extend_is_incremental() -> None:
    tokens = list(range(11))
    hashes: list[BlockHash] = []
    for end in range(len(tokens) + 1):
        extend_block_hashes(hashes, tokens[:end], 3, b"s")
        assert hashes == compute_block_hashes(tokens[:end], 3, b"s")
    assert len(hashes) == 3


def test_block_hash_is_a_value() -> None:
    parent = root_digest(b"")
    assert hash_block_tokens(parent, [1, 2]) == hash_block_tokens(parent, (1, 2))
    assert hash_block_tokens(parent, [1, 2]) != hash_block_tokens(parent, [2, 1])


def test_stable_across_processes_and_hash_seeds() -> None:
    code = (
        "import json; from samebits.engine.prefix_hash import compute_block_hashes as c; "
        "print(json.dumps([h.digest.hex() for h in c(list(range(20)), 4, b'salt')]))"
    )
    here = [h.digest.hex() for h in compute_block_hashes(list(range(20)), 4, b"salt")]
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONPATH": str(SRC), "PYTHONHASHSEED": seed}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert json.loads(out.stdout) == here
