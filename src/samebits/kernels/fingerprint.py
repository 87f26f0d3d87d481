"""Deployment fingerprint: a stable SHA-256 over everything that fixes the logits bits.

Covers the kernel plan (and its start-up qualification results), the weights' content, the
model config, software versions and hardware. Invariant: identical across runs of the same
deployment; any change of one component changes it (test: tests/unit/test_fingerprint.py).

The *numerics id* (`numerics_components`, `numerics_id`) is the SHA-256 of the part of the
components that fixes the bits: plan description (a GPU plan's without its launch-only
lines), kernel definitions, MMA model and the ex2 table (GPU plans), weights and model config; a replay plan (`kernels/replay`) has the id of the GPU plan whose
bits it computes. The rest (`machine_components`: GPU name, driver, host CPU name,
Python and package versions that change no bits) may differ between two machines that
compute the same bits. A CPU plan's bits are not shown independent of the BLAS build, the
native kernels' build, the torch/numba versions or the ISA, so those are numerics there.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import platform
import sys
from importlib import metadata
from pathlib import Path

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
    replays: dict | None = None, mma_probe: dict | None = None,
) -> dict:  # fmt: skip
    """`specializations`: the compiled kernel variants a GPU plan may launch (see
    `samebits.kernels.triton.backend.linear_specializations`); `certificates`: the kernel
    certificate set's status ("certified" / "uncertified"), digest and units (GPU plans, see
    `samebits.kernels.triton.certified.gate`); `replays`: the GPU deployment a replay plan
    computes (`samebits.kernels.replay.components.replayed_components`); `mma_probe`: the
    GPU's start-up MMA qualification (`kernels/triton/mma_probe.probe_component`)."""
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
        if mma_probe is not None:
            components["mma_probe"] = mma_probe
    if replays is not None:
        components["replays"] = replays
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


NUMERICS_FORMAT = 1
# versions that decide a CPU plan's bits (its kernels are compiled or dispatched by them)
CPU_NUMERICS_VERSIONS = ("torch", "numpy", "numba", "llvmlite", "torch_build",
                         "native_kernels_build")  # fmt: skip
# a GPU plan's host-side thread counts only schedule CPU work: no bits
HOST_ONLY_PLAN_FIELDS = ("num_threads", "torch_threads")


def numerics_components(components: dict) -> dict:
    """What fixes the bits, out of a deployment's `components` (see module docstring).

    Derived from the components' plan description (never from kernel names written here), so
    a plan whose ops change (another kernel) changes the numerics id. A replay plan's are
    those of the GPU deployment it computes (its ``replays`` component)."""
    if "replays" in components:
        replayed = {k: v for k, v in components.items() if k != "replays"}
        return numerics_components({**replayed, **components["replays"]})
    plan = dict(components["plan"])
    numerics = {
        "format": NUMERICS_FORMAT,
        "model_config": components["model_config"],
        "weights_sha256": components["weights_sha256"],
        # the structured-outputs masks decide guided tokens (a replay must build the same)
        "structured": {"llguidance": components["versions"].get("llguidance", "absent")},
    }
    if plan.get("device") == "cpu":
        versions, hw = components["versions"], components["hardware"]
        numerics["cpu_kernels"] = {
            **{k: versions.get(k, "absent") for k in CPU_NUMERICS_VERSIONS},
            "isa": hw.get("flags", ""),
            "torch_cpu_capability": hw.get("torch_cpu_capability", ""),
        }
    else:
        for key in HOST_ONLY_PLAN_FIELDS:
            plan.pop(key, None)
        plan["ops"] = _numerics_ops(plan.get("ops", {}))
        numerics.update(_gpu_numerics(components))
    numerics["plan"] = plan
    return numerics


# a GPU plan's op lines of launch choices only (`triton/describe.py`): tile height and row
# packing (certificate goals: the kernel prover's batch and tile-height invariance), warps,
# pipeline stages and register cap (test: the GPU runs compare the bits of launch variants)
LAUNCH_ONLY_OPS = ("attention_launch",)


def _numerics_ops(ops: dict) -> dict:
    """A GPU plan's op descriptions without the launch-only ones (`LAUNCH_ONLY_OPS`:
    launch choices certified or tested to change no bit; the fingerprint keeps them)."""
    return {op: text for op, text in ops.items() if op not in LAUNCH_ONLY_OPS}


def _gpu_numerics(components: dict) -> dict:
    """A GPU plan's kernel definitions (sources, compiled variants, compiler),
    the MMA model its bits follow and the architecture that model describes."""
    gpu_info = components.get("gpu", {})
    # the certificates are evidence about the bits, not what fixes them: the same kernels and
    # specializations give the same bits proved or not, so a re-proof (a prover change, a new
    # class certificate) keeps the numerics id and the logs served before it verifiable; the
    # certificates' status and digest stay in the fingerprint
    return {
        "kernel_sources": kernel_sources_digest(),
        "specializations": list(components.get("specializations", ())),
        "compiler": {"triton": gpu_info.get("triton", "absent")},
        "architecture": gpu_info.get("capability", "unknown"),
        "mma_model": mma_model_definition(),
        "ex2_table": ex2_table_sha256(),
        **_probe_numerics(components.get("mma_probe")),
    }


def _probe_numerics(probe: dict | None) -> dict:
    """Nothing when the GPU's MMA probe gave the emulator's bits (or predates the probe: the
    numerics id of a passing GPU is unchanged); else its status, so a GPU whose bits differ
    from the model does not share the numerics id of the CPU replay (which assumes them)."""
    if probe is None or probe.get("status") == "equal":
        return {}
    return {"mma_probe": {"status": probe.get("status"), "vectors": probe.get("vectors_sha256")}}


def kernel_sources_digest() -> str:
    """SHA-256 over (name, SHA-256) of the GPU kernel definitions `kernels/triton/_*.py`."""
    h = hashlib.sha256()
    for path in sorted((Path(__file__).parent / "triton").glob("_*.py")):
        digest = hashlib.sha256(path.read_text(encoding="utf-8").encode()).hexdigest()
        h.update(f"{path.name}|{digest}\n".encode())
    return h.hexdigest()


def ex2_table_sha256() -> str:
    """The table that defines the attention's exponential (`kernels/replay/ex2q.py`)."""
    from samebits.kernels.replay.ex2q import TABLE_SHA256

    return TABLE_SHA256


def mma_model_definition() -> dict:
    """The k16 MMA step the GPU plan's bits follow (`kernels/cpu/mma_model.py`): step, grid
    and the default switches."""
    from samebits.kernels.cpu import mma_model

    return {
        "step": mma_model.STEP,
        "grid": mma_model.GRID,
        "switches": dataclasses.asdict(mma_model.DEFAULT),
    }


def machine_components(components: dict) -> dict:
    """The components outside the numerics: the machine that ran the deployment."""
    versions = dict(components["versions"])
    hw = dict(components["hardware"])
    if components["plan"].get("device") == "cpu":
        for key in CPU_NUMERICS_VERSIONS:
            versions.pop(key, None)
        hw.pop("flags", None)
        hw.pop("torch_cpu_capability", None)
    versions.pop("llguidance", None)
    machine = {"versions": versions, "hardware": hw, "qualification": components["qualification"]}
    gpu_info = {k: v for k, v in components.get("gpu", {}).items()
                if k not in ("triton", "capability")}  # fmt: skip
    if gpu_info:
        machine["gpu"] = gpu_info
    if "topology" in components:
        machine["topology"] = components["topology"]
    if "mma_probe" in components:
        machine["mma_probe"] = components["mma_probe"]
    return machine


def numerics_id(components: dict) -> str:
    """Hex SHA-256 of the canonical JSON of `numerics_components(components)`."""
    return fingerprint(numerics_components(components))
