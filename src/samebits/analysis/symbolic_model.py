"""A symbolic decoder whose values record their data flow, for model checking the engine core.

Every value is an 8-byte BLAKE2b digest of exactly the inputs a real transformer layer would
combine (values are fixed-size, so concatenation is unambiguous):

    hidden_0[p]  = H("emb", token_p, p)
    kv_l[p]      = H("kv", l, hidden_l[p])                 written to slot(p) of layer l
    attn_l[p]    = H("attn", l, kv_l read at slots of positions 0..p, in order)
    hidden_l+1[p]= H("mlp", l, hidden_l[p], attn_l[p])
    logits[p]    = H("logits", hidden_L[p])
    token        = H("sample", logits row, seed, output index) mod vocab_size

`SymbolicRunner` executes a `SchedulerOutput` through a paged cache exactly as the runner
contract says (write the step's K/V to the slots given by the block table, then attend over
positions 0..p read through the block table, layer by layer for the whole batch).
`reference_view` is the cold, batch-of-one, full-history recomputation with a contiguous
cache. A wrong block mapping, a stale or reused block, a mis-ordered read or a missed write
changes a digest, so the paged rows differ from the reference rows.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from samebits.engine.scheduler import ScheduledRequest, SchedulerOutput

UNWRITTEN = b"\x00" * 8  # what an attention read of a never-written slot sees


class ContractViolation(Exception):
    """A `SchedulerOutput` breaks the scheduler -> runner contract."""


def _h(tag: bytes, *parts: bytes) -> bytes:
    return hashlib.blake2b(tag + b"".join(parts), digest_size=8).digest()


def _int8(value: int) -> bytes:
    return value.to_bytes(8, "little", signed=True)


def embed(token_id: int, position: int) -> bytes:
    return _h(b"emb", _int8(token_id), _int8(position))


def kv_entry(layer: int, hidden: bytes) -> bytes:
    return _h(b"kv", _int8(layer), hidden)


def attend(layer: int, values: Sequence[bytes]) -> bytes:
    return _h(b"attn", _int8(layer), *values)


def mlp(layer: int, hidden: bytes, attn: bytes) -> bytes:
    return _h(b"mlp", _int8(layer), hidden, attn)


def logits_row(hidden: bytes) -> bytes:
    return _h(b"logits", hidden)


def sample(row: bytes, seed: int, output_index: int, vocab_size: int) -> int:
    """A pure function of (row, seed, output index): the symbolic counterpart of the sampler."""
    digest = _h(b"sample", row, _int8(seed), _int8(output_index))
    return int.from_bytes(digest[:4], "little") % vocab_size


def forward_last_row(token_ids: Sequence[int], num_layers: int) -> bytes:
    """Cold forward pass over the whole history (contiguous cache, batch of one)."""
    hidden = [embed(t, p) for p, t in enumerate(token_ids)]
    for layer in range(num_layers):
        kv = [kv_entry(layer, h) for h in hidden]
        hidden = [mlp(layer, h, attend(layer, kv[: p + 1])) for p, h in enumerate(hidden)]
    return logits_row(hidden[-1])


@dataclass(frozen=True)
class ReferenceView:
    """`rows[i]`, `tokens[i]`: the reference logits row and token of output index i."""

    rows: tuple[bytes, ...]
    tokens: tuple[int, ...]


def reference_view(
    prompt: Sequence[int], seed: int, num_outputs: int, num_layers: int, vocab_size: int
) -> ReferenceView:
    """Ref(input): each row from a cold recomputation of prompt + the tokens before it."""
    history = list(prompt)
    rows: list[bytes] = []
    tokens: list[int] = []
    for index in range(num_outputs):
        row = forward_last_row(history, num_layers)
        token = sample(row, seed, index, vocab_size)
        rows.append(row)
        tokens.append(token)
        history.append(token)
    return ReferenceView(tuple(rows), tuple(tokens))


class SymbolicRunner:
    """A paged KV cache of `num_blocks * block_size` slots per layer and the symbolic model."""

    def __init__(self, num_layers: int, num_blocks: int, block_size: int) -> None:
        self.num_layers = num_layers
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.kv: list[list[bytes | None]] = [
            [None] * (num_blocks * block_size) for _ in range(num_layers)
        ]

    def execute(self, out: SchedulerOutput) -> tuple[dict[str, bytes], list[int]]:
        """Logits row per `sample=True` request, and the slots written (in write order)."""
        slots = [self._slots(item) for item in out.scheduled]
        hidden = [
            [embed(t, item.start_position + j) for j, t in enumerate(item.token_ids)]
            for item in out.scheduled
        ]
        for layer in range(self.num_layers):
            for item, item_slots, item_hidden in zip(out.scheduled, slots, hidden, strict=True):
                self._write(layer, item, item_slots, item_hidden)
            hidden = [
                self._attend(layer, item, item_slots, item_hidden)
                for item, item_slots, item_hidden in zip(out.scheduled, slots, hidden, strict=True)
            ]
        rows = {
            item.request_id: logits_row(item_hidden[-1])
            for item, item_hidden in zip(out.scheduled, hidden, strict=True)
            if item.sample
        }
        written = [
            slot
            for item, item_slots in zip(out.scheduled, slots, strict=True)
            for slot in item_slots[item.start_position :]
        ]
        return rows, written

    def _slots(self, item: ScheduledRequest) -> list[int]:
        """Slot of every position 0 .. end-1 of the request, through its block table."""
        end = item.start_position + len(item.token_ids)
        if not item.token_ids:
            raise ContractViolation(f"request {item.request_id!r} scheduled with no token")
        if len(item.block_table) * self.block_size < end:
            raise ContractViolation(
                f"request {item.request_id!r}: block table {item.block_table} does not cover "
                f"positions [0, {end})"
            )
        for block_id in item.block_table:
            if not 0 <= block_id < self.num_blocks:
                raise ContractViolation(f"request {item.request_id!r}: bad block id {block_id}")
        size = self.block_size
        return [item.block_table[p // size] * size + p % size for p in range(end)]

    def _write(self, layer: int, item: ScheduledRequest, slots: list[int], hidden: list[bytes]):
        cache = self.kv[layer]
        for j, h in enumerate(hidden):
            cache[slots[item.start_position + j]] = kv_entry(layer, h)

    def _attend(
        self, layer: int, item: ScheduledRequest, slots: list[int], hidden: list[bytes]
    ) -> list[bytes]:
        cache = self.kv[layer]
        out = []
        for j, h in enumerate(hidden):
            position = item.start_position + j
            values = [cache[s] or UNWRITTEN for s in slots[: position + 1]]
            out.append(mlp(layer, h, attend(layer, values)))
        return out
