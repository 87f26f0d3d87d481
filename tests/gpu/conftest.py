"""GPU tests (marker `gpu`, deselected by default; run on a CUDA machine with
`python -m pytest -m gpu tests/gpu`). Results are printed in pytest's terminal summary and,
when $SAMEBITS_GPU_RESULTS names a folder, written there as gpu_tests.json for RESULTS.md."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

GPU_RESULTS: dict[str, object] = {}


@pytest.fixture(scope="session")
def cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")


@pytest.fixture
def gpu_record():
    """record(key, value): keep a measured result for the summary and the JSON file (written
    after every record, so a run stopped by a time limit keeps what it measured)."""

    def record(key: str, value: object) -> None:
        GPU_RESULTS[key] = value
        _write()

    return record


def _write() -> None:
    folder = os.environ.get("SAMEBITS_GPU_RESULTS")
    if folder:
        Path(folder, "gpu_tests.json").write_text(json.dumps(GPU_RESULTS, indent=1, default=str))


def pytest_terminal_summary(terminalreporter):
    if GPU_RESULTS:
        terminalreporter.section("samebits GPU results")
        for key, value in GPU_RESULTS.items():
            terminalreporter.write_line(f"{key}: {value}")
