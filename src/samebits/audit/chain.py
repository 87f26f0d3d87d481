"""Canonical serialization and the hash chain of audit entries.

An entry is a JSON object. Its `entry_hash` is the SHA-256 (hex) of the canonical JSON of the
entry without the `entry_hash` key; the entry carries `prev_hash`, the `entry_hash` of the
entry before it (`GENESIS_HASH` for the first), so editing, dropping, reordering or inserting
an entry breaks the chain at that point. Canonical JSON: sorted keys, no whitespace, ASCII
only, no NaN/Infinity; parsing a canonical line and re-serializing it gives the same bytes.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

GENESIS_HASH = "0" * 64
HASH_KEY = "entry_hash"
PREV_KEY = "prev_hash"
SEQ_KEY = "seq"


def canonical_json(obj: Any) -> str:
    """Deterministic JSON text of `obj` (raises ValueError on NaN/Infinity)."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    )


def compute_entry_hash(entry: dict[str, Any]) -> str:
    """SHA-256 hex of the canonical JSON of `entry` minus its `entry_hash` key."""
    body = {k: v for k, v in entry.items() if k != HASH_KEY}
    return hashlib.sha256(canonical_json(body).encode("ascii")).hexdigest()


def seal_entry(record: dict[str, Any], seq: int, prev_hash: str) -> dict[str, Any]:
    """Return `record` with `seq`, `prev_hash` and its `entry_hash` filled in."""
    entry = {k: v for k, v in record.items() if k not in (HASH_KEY, PREV_KEY, SEQ_KEY)}
    entry[SEQ_KEY] = seq
    entry[PREV_KEY] = prev_hash
    entry[HASH_KEY] = compute_entry_hash(entry)
    return entry
