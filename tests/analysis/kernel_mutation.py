"""Planted bugs for the kernel prover's tests: a kernel source with one anchor replaced."""

from __future__ import annotations


def mutate(text: str, old: str, new: str, count: int = 1) -> str:
    """`text` with `old`, found exactly `count` times (the attention kernel's masked and interior
    tile updates repeat some lines), replaced by `new`."""
    assert text.count(old) == count, f"mutation anchor not found {count} time(s): {old!r}"
    return text.replace(old, new)
