"""Chained block hashes that tie a KV block to the whole token prefix ending at it.

`hash_i = sha256(hash_{i-1} || len || tokens of block i)`, where `hash_{-1}` is the root digest
derived from `cache_salt` (the model/plan identity given by the engine) and every token is
encoded as a little-endian signed 64-bit integer. The result depends only on the bytes hashed:
stable across processes, machines and Python versions (no `hash()`, no random salt).

A `BlockHash` keeps the block's own token ids next to the digest so a cache hit compares the
tokens too; a false hit on an equal digest would need a SHA-256 collision on the prefix.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass

DIGEST_SIZE = 32
_ROOT_DOMAIN = b"samebits.prefix_hash.v1\x00"


@dataclass(frozen=True)
class BlockHash:
    """Identity of one full block: chained digest of all tokens up to the block's end, plus the
    block's own token ids (`len(token_ids) == block_size`)."""

    digest: bytes
    token_ids: tuple[int, ...]


def root_digest(cache_salt: bytes) -> bytes:
    """The chain's seed: a digest of the engine's cache salt (model/plan identity)."""
    if not isinstance(cache_salt, bytes):
        raise ValueError(f"cache_salt must be bytes, got {type(cache_salt).__name__}")
    length = struct.pack("<Q", len(cache_salt))
    return hashlib.sha256(_ROOT_DOMAIN + length + cache_salt).digest()


def hash_block_tokens(parent_digest: bytes, token_ids: Sequence[int]) -> BlockHash:
    """Hash of the block holding `token_ids`, chained after the block with `parent_digest`."""
    tokens = tuple(token_ids)
    payload = struct.pack(f"<Q{len(tokens)}q", len(tokens), *tokens)
    return BlockHash(hashlib.sha256(parent_digest + payload).digest(), tokens)


def extend_block_hashes(
    block_hashes: list[BlockHash],
    token_ids: Sequence[int],
    block_size: int,
    cache_salt: bytes,
) -> None:
    """Append to `block_hashes` the hashes of the full blocks of `token_ids` it lacks.

    Precondition: `block_hashes` are the hashes of the first `len(block_hashes)` full blocks of
    `token_ids` (the chain only grows, since tokens are only appended)."""
    parent = block_hashes[-1].digest if block_hashes else root_digest(cache_salt)
    for start in range(len(block_hashes) * block_size, len(token_ids) - block_size + 1, block_size):
        block_hash = hash_block_tokens(parent, token_ids[start : start + block_size])
        block_hashes.append(block_hash)
        parent = block_hash.digest


def compute_block_hashes(
    token_ids: Sequence[int], block_size: int, cache_salt: bytes
) -> list[BlockHash]:
    """Hashes of every full block of `token_ids` (a trailing partial block gets none)."""
    hashes: list[BlockHash] = []
    extend_block_hashes(hashes, token_ids, block_size, cache_salt)
    return hashes
