"""The CLI as a user runs it on the embedded default model."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "samebits.cli", *args], capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow
def test_generate_answers_and_info_prints_plan():
    gen = _run("generate", "What is the capital of France?", "--max-tokens", "16")
    assert gen.returncode == 0, gen.stderr
    assert "Paris" in gen.stdout
    assert "finish_reason=" in gen.stderr and "fingerprint=" in gen.stderr
    info = _run("info", "--threads", "2")
    assert info.returncode == 0, info.stderr
    assert "kernel plan: invariant" in info.stdout and "attention" in info.stdout
    assert "fingerprint: " in info.stdout and "qualification: " in info.stdout


def test_bad_arguments_give_clear_errors(tmp_path):
    missing = _run("generate", "hi", "--model", str(tmp_path / "nope"))
    assert missing.returncode != 0 and "nope" in missing.stderr
    bad = _run("generate", "hi", "--temperature", "-1")
    assert bad.returncode == 2 and "temperature" in bad.stderr
