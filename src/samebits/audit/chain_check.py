"""Checking the hash chain of an audit log.

Each entry must hash to its `entry_hash` (else it was *edited*), and its `prev_hash` must be
the previous entry's `entry_hash` (else an entry was *dropped*, *reordered* or *inserted*
just before it; the `seq` numbers say which is most likely). A published head hash, when
given, catches entries removed from or appended to the end of the log.
"""

from __future__ import annotations

from dataclasses import dataclass

from samebits.audit.chain import GENESIS_HASH, compute_entry_hash
from samebits.audit.reader import LoggedEntry

REQUIRED_KEYS = ("seq", "prev_hash", "entry_hash", "type")


@dataclass(frozen=True)
class ChainIssue:
    """A break in the chain. `kind`: edited, dropped, reordered, inserted, malformed, head."""

    kind: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.kind}: {self.message}"


def check_chain(entries: list[LoggedEntry], expected_head: str | None = None) -> list[ChainIssue]:
    """Every break in the chain of `entries` (in file order); empty when the chain is intact."""
    issues: list[ChainIssue] = []
    prev_hash, prev_seq = GENESIS_HASH, -1
    for logged in entries:
        issues.extend(_check_entry(logged, prev_hash, prev_seq))
        prev_hash = str(logged.entry.get("entry_hash"))
        prev_seq = _seq_of(logged, prev_seq)
    if expected_head is not None and prev_hash != expected_head:
        message = (
            f"last entry hash {prev_hash[:16]}... differs from the published head "
            f"{expected_head[:16]}... (entries removed from or added to the end)"
        )
        issues.append(ChainIssue("head", "end of log", message))
    return issues


def _check_entry(logged: LoggedEntry, prev_hash: str, prev_seq: int) -> list[ChainIssue]:
    entry = logged.entry
    missing = [k for k in REQUIRED_KEYS if k not in entry]
    if missing:
        return [ChainIssue("malformed", logged.where, f"missing keys {missing}")]
    issues = []
    if compute_entry_hash(entry) != entry["entry_hash"]:
        issues.append(
            ChainIssue(
                "edited", logged.where, f"seq {entry['seq']}: content does not match its hash"
            )
        )
    if entry["prev_hash"] != prev_hash:
        issues.append(_link_issue(logged, prev_seq))
    return issues


def _link_issue(logged: LoggedEntry, prev_seq: int) -> ChainIssue:
    seq = logged.entry["seq"]
    base = f"seq {seq} after seq {prev_seq}: prev_hash does not match the previous entry"
    if not isinstance(seq, int) or seq == prev_seq + 1:
        return ChainIssue(
            "inserted", logged.where, base + " (entry inserted or replaced before it)"
        )
    if seq > prev_seq + 1:
        gap = seq - prev_seq - 1
        return ChainIssue("dropped", logged.where, base + f" ({gap} entries missing before it)")
    if seq == prev_seq:
        return ChainIssue(
            "inserted", logged.where, base + " (duplicate seq: an entry was inserted)"
        )
    return ChainIssue("reordered", logged.where, base + " (entries out of order)")


def _seq_of(logged: LoggedEntry, prev_seq: int) -> int:
    seq = logged.entry.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else prev_seq + 1
