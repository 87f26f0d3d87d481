"""The package's layers, read from the source: every import (module level and inside
functions) of every module under src/samebits, checked against the arrows of
docs/architecture.md, "Layers". Adding an import that points up fails here, naming the
file, the line and the rule.

Rules:
- the runtime (engine/, kernels/, model/, graphs/, spec/, structured/, tools/, config, sampling,
  deployment, llm, outputs, detokenizer, bits, engine_args, parallel/) never imports analysis/,
  testing/, server/, audit/ or cli;
- kernels/ never imports engine/; model/ never imports engine/; parallel/ never imports engine/;
- no import cycle among kernels/ modules, nor among engine/ modules;
- the certified runtime (kernels/triton/certified/) imports no solver;
- importing the engine (engine/engine.py and the torch-free modules it uses) imports no torch.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
PKG = SRC / "samebits"

RUNTIME = (
    "engine", "kernels", "model", "graphs", "spec", "structured", "tools", "config", "sampling",
    "deployment", "llm", "outputs", "detokenizer", "bits", "engine_args", "parallel",
)  # fmt: skip
OFFLINE_OR_ABOVE = ("analysis", "testing", "server", "audit", "cli")
SOLVERS = ("z3",)
TORCH_FREE_ENGINE = (
    "samebits.engine.engine", "samebits.engine.intake", "samebits.engine.output_processor",
    "samebits.engine.assembly", "samebits.engine.step_result", "samebits.engine.scheduler",
    "samebits.config", "samebits.sampling",
)  # fmt: skip


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _imports(name: str) -> list[tuple[int, str]]:
    """(line, imported module) of every import in the module: `from a import b` names
    `a.b` when that is a module of the package, else `a`; relative imports resolved."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for a in node.names:
                full = f"{base}.{a.name}"
                out.append((node.lineno, full if full in MODULES else base))
    return out


def _layer(module: str) -> str:
    """The first name under samebits (`engine`, `config`, ...); '' outside the package."""
    parts = module.split(".")
    return parts[1] if parts[0] == "samebits" and len(parts) > 1 else ""


def _in(module: str, layer: str) -> bool:
    return module == f"samebits.{layer}" or module.startswith(f"samebits.{layer}.")


def _violations(source_layers, forbidden) -> list[str]:
    bad = []
    for name in MODULES:
        if _layer(name) not in source_layers:
            continue
        for line, target in _imports(name):
            if any(_in(target, f) for f in forbidden):
                bad.append(f"{MODULES[name].relative_to(SRC)}:{line} imports {target}")
    return bad


def test_the_runtime_imports_nothing_offline_or_above_it() -> None:
    assert _violations(RUNTIME, OFFLINE_OR_ABOVE) == []


def test_kernels_and_model_never_import_the_engine() -> None:
    assert _violations(("kernels", "model", "parallel"), ("engine",)) == []


def test_the_certified_runtime_imports_no_solver() -> None:
    bad = []
    for name, path in MODULES.items():
        if _in(name, "kernels.triton.certified"):
            for line, target in _imports(name):
                if target.split(".")[0] in SOLVERS or _in(target, "analysis"):
                    bad.append(f"{path.relative_to(SRC)}:{line} imports {target}")
    assert bad == []


def _edges(layer: str) -> dict[str, set[str]]:
    """Import edges among the layer's modules; an edge to a module's own ancestor package
    is left out (Python runs a package's __init__ before its modules anyway)."""
    edges: dict[str, set[str]] = {}
    for name in MODULES:
        if _in(name, layer):
            targets = {t for _, t in _imports(name) if _in(t, layer) and t in MODULES}
            edges[name] = {t for t in targets if t != name and not name.startswith(t + ".")}
    return edges


def _cycle(edges: dict[str, set[str]]) -> list[str]:
    """One import cycle (as a path that returns to its start), or [] when there is none."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1  # on the current path
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt) :] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2  # done: no cycle through it
        stack.pop()
        return []

    for start in sorted(edges):
        if start not in state and (found := visit(start)):
            return found
    return []


@pytest.mark.parametrize("layer", ["kernels", "engine"])
def test_no_import_cycle(layer: str) -> None:
    assert _cycle(_edges(layer)) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: a planted two-module cycle and a longer one are found."""
    assert _cycle({"a": {"b"}, "b": {"a"}}) == ["a", "b", "a"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_the_import_reader_sees_imports_inside_functions() -> None:
    """`_imports` reads function-level and relative imports (a planted module would be
    caught): engine/assembly.py imports the runner inside a function."""
    found = {t for _, t in _imports("samebits.engine.assembly")}
    assert "samebits.engine.runner" in found


def test_importing_the_engine_imports_no_torch() -> None:
    code = (
        "import sys\n"
        f"for m in {TORCH_FREE_ENGINE!r}: __import__(m)\n"
        "heavy = sorted(m for m in ('torch', 'triton', 'z3') if m in sys.modules)\n"
        "print(','.join(heavy))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True,
        env={"PYTHONPATH": str(SRC), "PATH": ""},
    )  # fmt: skip
    assert done.stdout.strip() == "", f"importing the engine imported {done.stdout.strip()}"
