"""Collects the determinism-matrix counts and prints them in pytest's terminal summary."""

from __future__ import annotations

import pytest

MATRIX_REPORTS: list[str] = []


@pytest.fixture
def matrix_log():
    return MATRIX_REPORTS.append


def pytest_terminal_summary(terminalreporter):
    if MATRIX_REPORTS:
        terminalreporter.section("samebits determinism matrix")
        for line in MATRIX_REPORTS:
            terminalreporter.write_line(line)
