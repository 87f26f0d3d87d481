"""Deployment fingerprint: a stable SHA-256 over everything that fixes the logits bits.

Covers the kernel plan (and its start-up qualification results), the weights' content, the
model config, software versions and hardware. Invariant: identical across runs of the same
deployment; any change of one component changes it (test: tests/unit/test_fingerprint.py).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import sys
from importlib import metadata

import torch

# llguidance computes the structured-outputs masks: its version decides guided tokens
VERSIONED_PACKAGES = ("samebits", "torch", "numpy", "numba", "llvmlite", "llguidance")


def weights_digest(weights: dict[str, torch.Tensor]) -> str:
    """SHA-256 over (name, dtype, shape, bytes) of every tensor, in sorted name order."""
    h = hashlib.sha256()
    for name in sorted(weights):
        t = weights[name].contiguous()
        h.update(f"{name}|{t.dtype}|{tuple(t.shape)}\n".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def software_versions() -> dict[str, str]:
    versions = {"python": sys.version.split()[0], "libc": "-".join(platform.libc_ver())}
    for pkg in VERSIONED_PACKAGES:
        try:
            versions[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            versions[pkg] = "absent"
    versions["torch_build"] = _blas_line()
    versions["native_kernels_build"] = _native_build()
    return versions


def _native_build() -> str:
    from samebits.kernels.cpu import native

    return native.build_key() if native.available() else "unavailable"


def _blas_line() -> str:
    """The BLAS library line of torch's build config (e.g. the MKL version)."""
    for line in torch.__config__.show().splitlines():
        if "Math Kernel Library" in line or "BLAS_INFO" in line:
            return line.strip()[:200]
    return "unknown"


def hardware() -> dict[str, str]:
    info = {"machine": platform.machine(), "cpu": platform.processor() or "unknown", "flags": ""}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name":
                    info["cpu"] = value.strip()
                elif key == "flags":
                    info["flags"] = " ".join(sorted(value.split()))
                    break
    except OSError:
        pass
    info["torch_cpu_capability"] = torch.backends.cpu.get_cpu_capability()
    return info


def gpu() -> dict[str, str]:
    """The CUDA device that runs a GPU plan: name, compute capability, driver, CUDA runtime and
    Triton version (the compiler of the kernels)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    try:
        triton_version = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton_version = "absent"
    return {
        "name": props.name,
        "capability": f"{props.major}.{props.minor}",
        "multiprocessors": str(props.multi_processor_count),
        "driver": _driver_version(),
        "cuda": str(torch.version.cuda),
        "triton": triton_version,
    }


def _driver_version() -> str:
    import subprocess

    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=True,
        )  # fmt: skip
        return out.stdout.strip().splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        return "unknown"


def fingerprint_components(
    plan, model_config, weights_hash: str, qualification: dict,
    specializations: list[str] | None = None, certificates: dict | None = None,
) -> dict:  # fmt: skip
    """`specializations`: the compiled kernel variants a GPU plan may launch (see
    `samebits.kernels.triton.backend.linear_specializations`); `certificates`: the kernel
    certificate set's status ("certified" / "uncertified"), digest and units (GPU plans, see
    `samebits.kernels.triton.certified.gate`)."""
    components = {
        "plan": plan.to_dict(),
        "qualification": qualification,
        "model_config": _config_dict(model_config),
        "weights_sha256": weights_hash,
        "versions": software_versions(),
        "hardware": hardware(),
    }
    if plan.device == "cuda":
        components["gpu"] = gpu()
        components["specializations"] = list(specializations or ())
        if certificates is not None:
            components["certificates"] = certificates
    return components


def _config_dict(model_config) -> dict:
    """The model config as data: its own `to_dict` (a MoE config names its experts, top-k,
    renormalization and sparse-layer layout there), else the dataclass fields."""
    to_dict = getattr(model_config, "to_dict", None)
    return to_dict() if to_dict is not None else dataclasses.asdict(model_config)


def fingerprint(components: dict) -> str:
    """Hex SHA-256 of the canonical JSON of the components."""
    blob = json.dumps(components, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()
