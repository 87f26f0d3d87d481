"""The audit tests reuse the server tests' fake engine and uvicorn harness."""

from __future__ import annotations

import sys
from pathlib import Path

SERVER_TESTS = str(Path(__file__).resolve().parents[1] / "server")
if SERVER_TESTS not in sys.path:
    sys.path.insert(0, SERVER_TESTS)
