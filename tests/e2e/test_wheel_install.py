"""A non-editable install works like the checkout: the wheel ships every file the native build
needs (C sources and the headers they include) and the pure-Python Triton package, and the
samebits imported from it builds the C kernels and chooses the native plan (issue 10: a wheel
that lacked sbpool.h/sbexp.h silently fell back to MKL tiles + numba)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from samebits.kernels.cpu import native

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "samebits"

PROBE = """
import json, warnings
warnings.filterwarnings("error", message="samebits: the native")  # a fallback fails it
import samebits
from samebits.kernels.cpu import native
from samebits.kernels.plan import build_plan
from samebits.sampling import SamplingParams
plan = build_plan("invariant", 2)
guided = SamplingParams(structured_outputs={"json": {"type": "object"}}).structured_outputs
print(json.dumps({"file": samebits.__file__, "linear": plan.linear_kernel,
                  "attention": plan.attention_kernel, "error": native.build_error(),
                  "describe": plan.describe(), "guided": guided.kind}))
"""


def _copy_project(dest: Path) -> Path:
    """The files a build reads (pyproject, README, src), without build leftovers: building from
    a copy keeps build/ and *.egg-info out of the shared checkout and stale files out of the
    wheel."""
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, dest / name)
    for license_file in REPO.glob("LICEN[CS]E*"):
        shutil.copy2(license_file, dest / license_file.name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "*.so")
    shutil.copytree(REPO / "src", dest / "src", ignore=ignore)
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    project = _copy_project(tmp / "project")
    dist = tmp / "dist"
    cmd = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
    proc = subprocess.run([*cmd, "-w", str(dist), str(project)], capture_output=True, text=True)
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout}\n{proc.stderr}"
    (built,) = dist.glob("samebits-*.whl")
    return built


def test_wheel_ships_native_sources_headers_and_triton(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    needed = [p.relative_to(PACKAGE.parent) for p in native.SOURCES + native.HEADERS]
    needed += [p.relative_to(PACKAGE.parent) for p in (PACKAGE / "structured").glob("*.py")]
    needed += [p.relative_to(PACKAGE.parent) for p in (PACKAGE / "kernels" / "triton").glob("*.py")]
    missing = sorted(str(p) for p in needed if p.as_posix() not in names)
    assert not missing, f"the wheel lacks {missing}"


def test_installed_wheel_builds_and_uses_the_native_kernels(wheel, tmp_path):
    site = tmp_path / "site"
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q"]
    proc = subprocess.run([*cmd, "--target", str(site), str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"
    env = dict(os.environ, PYTHONPATH=str(site), SAMEBITS_CACHE_DIR=str(tmp_path / "cache"))
    env.pop("SAMEBITS_LINEAR_KERNEL", None)
    proc = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, f"the probe failed:\n{proc.stderr}"
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert Path(got["file"]).resolve().is_relative_to(site.resolve()), got["file"]
    assert got["error"] is None
    assert (got["linear"], got["attention"]) == ("sbgemm", "sbattn"), got["describe"]
    assert got["guided"] == "json"  # structured outputs (llguidance) work from the wheel
    assert "failed to build" not in got["describe"]
    assert list((tmp_path / "cache").glob("samebits-native-*.so")), "built outside the cache"


def test_every_included_header_is_listed():
    """native.HEADERS (hashed into the build key, checked before a build) names every local
    header the C sources include."""
    included = set()
    for path in (*native.SOURCES, *native.HEADERS):
        included |= set(re.findall(r'#include\s+"([^"]+)"', path.read_text()))
    assert included <= {p.name for p in native.HEADERS}
