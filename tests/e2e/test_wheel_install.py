"""A non-editable install works like the checkout: the wheel ships every file the native build
needs (C sources and the headers they include), the pure-Python Triton package and its shipped
kernel certificates, and the samebits imported from it builds the C kernels and chooses the
native plan (issue 10: a wheel that lacked sbpool.h/sbexp.h silently fell back to MKL tiles +
numba) and finds every shipped certificate valid for the kernels it installed."""

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
# the GPU plan's gate as the installed package runs it (no GPU needed): its shipped certificates
# (package data) against its own kernel files
CERTIFICATE_PROBE = """
import json
from samebits.kernels.triton.certified import gate, units
files = sorted(gate.SHIPPED_DIR.glob("*.json"))
res = gate.check([json.loads(f.read_text())["unit"] for f in files])
print(json.dumps({"directory": res["directory"], "kernels": str(units.KERNEL_DIR),
                  "files": [f.name for f in files], "digest": res["digest"],
                  "bad": {k: p for k, p in res["units"].items() if p is not None}}))
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
    triton = PACKAGE / "kernels" / "triton"  # with certified/ and its shipped certificates
    certificates = sorted((triton / "certified" / "certificates").glob("*.json"))
    assert certificates, "no shipped certificates in the checkout"
    needed += [p.relative_to(PACKAGE.parent) for p in [*triton.rglob("*.py"), *certificates]]
    missing = sorted(str(p) for p in needed if p.as_posix() not in names)
    assert not missing, f"the wheel lacks {missing}"


@pytest.fixture(scope="module")
def site(wheel, tmp_path_factory) -> Path:
    site = tmp_path_factory.mktemp("installed") / "site"
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q"]
    proc = subprocess.run([*cmd, "--target", str(site), str(wheel)], capture_output=True, text=True)
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout}\n{proc.stderr}"
    return site


def test_installed_wheel_builds_and_uses_the_native_kernels(site, tmp_path):
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


def test_installed_wheel_gates_on_its_shipped_certificates(site, tmp_path):
    """The installed gate reads the certificates shipped as package data (every one of the
    checkout's) and finds them valid for the kernel files installed next to it: a certificate
    left out of the wheel, or a kernel directory resolved outside the install, fails here."""
    from samebits.kernels.triton.certified import gate

    env = dict(os.environ, PYTHONPATH=str(site))
    env.pop(gate.ENV_DIR, None)
    proc = subprocess.run(
        [sys.executable, "-c", CERTIFICATE_PROBE], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, f"the probe failed:\n{proc.stderr}"
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    for key in ("directory", "kernels"):
        assert Path(got[key]).resolve().is_relative_to(site.resolve()), got[key]
    shipped = sorted(gate.SHIPPED_DIR.glob("*.json"))
    assert got["files"] == [f.name for f in shipped] and got["files"]
    assert got["bad"] == {}
    units = [json.loads(f.read_text())["unit"] for f in shipped]
    assert got["digest"] == gate.check(units, gate.SHIPPED_DIR)["digest"]


def test_every_included_header_is_listed():
    """native.HEADERS (hashed into the build key, checked before a build) names every local
    header the C sources include."""
    included = set()
    for path in (*native.SOURCES, *native.HEADERS):
        included |= set(re.findall(r'#include\s+"([^"]+)"', path.read_text()))
    assert included <= {p.name for p in native.HEADERS}
