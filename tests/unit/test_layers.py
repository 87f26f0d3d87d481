"""Layers import downward only: the deployment (plan + decoder + fingerprint) sits below the
engine; the cold reference forward lives in the engine layer (`samebits.engine.runner.cold_logits`)."""

from __future__ import annotations

import ast
from pathlib import Path

import samebits

SRC = Path(samebits.__file__).parent


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def test_deployment_does_not_import_upward():
    upward = ("samebits.engine", "samebits.server", "samebits.llm", "samebits.audit")
    bad = sorted(m for m in _imports(SRC / "deployment.py") if m.startswith(upward))
    assert bad == [], f"samebits/deployment.py imports {bad}"
