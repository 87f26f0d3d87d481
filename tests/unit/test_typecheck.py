"""mypy passes on the typed part of the package, with pyproject.toml's `[tool.mypy]` config.

TARGETS grows one module at a time: the modules they import are followed for their types,
but their own errors are not reported (`follow_imports = "silent"`).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ("src/samebits/engine", "src/samebits/config.py", "src/samebits/sampling.py")


@pytest.mark.slow  # with a cold cache 1-2 minutes on 2 cores; a warm one takes seconds
def test_mypy_passes_on_targets(
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # pytest's cache dir keeps mypy's cache between runs (a fresh tmp dir without it)
    cache = request.config.cache
    cache_dir = cache.mkdir("mypy") if cache is not None else tmp_path_factory.mktemp("mypy")
    monkeypatch.chdir(ROOT)  # the report names files relative to the repository root
    args = ["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir", str(cache_dir)]
    stdout, stderr, status = api.run([*args, *TARGETS])
    assert status == 0, f"mypy {' '.join(TARGETS)} exited with {status}:\n{stdout}{stderr}"
