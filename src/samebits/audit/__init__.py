"""Tamper-evident audit log of served requests, and its verifier.

`AuditLogWriter` appends one hash-chained JSON object per line; `read_log` reads a log back,
`check_chain` finds edited, dropped, reordered or inserted entries, and `verify_log`
re-executes a random sample of entries alone and compares their digests bit for bit.
"""

from samebits.audit.chain import GENESIS_HASH, canonical_json, compute_entry_hash
from samebits.audit.chain_check import ChainIssue, check_chain
from samebits.audit.reader import LogContents, LoggedEntry, read_log
from samebits.audit.writer import AppendResult, AuditLogWriter, default_audit_log_path

__all__ = [
    "GENESIS_HASH",
    "AppendResult",
    "AuditLogWriter",
    "ChainIssue",
    "LogContents",
    "LoggedEntry",
    "canonical_json",
    "check_chain",
    "compute_entry_hash",
    "default_audit_log_path",
    "read_log",
]
