"""The numerics id: what fixes the bits (plan description, kernel definitions, MMA model,
weights, model config), separate from the machine (GPU name, driver, host, Python); the
deployment fingerprint keeps covering both."""

from __future__ import annotations

import copy
import dataclasses

import pytest
import torch

from samebits.audit.record import ServedRequest, request_record, session_record
from samebits.deployment import build_deployment
from samebits.kernels import fingerprint as fp
from samebits.model import load_model


@pytest.fixture(scope="module")
def loaded(tiny_llama_dir):
    return load_model(tiny_llama_dir)


@pytest.fixture(scope="module")
def base(loaded):
    return build_deployment(loaded, "invariant", 2)


def gpu_components() -> dict:
    """Components shaped as a cuda deployment's (no GPU needed to compute the ids)."""
    return {
        "plan": {"name": "invariant", "device": "cuda", "num_threads": 4, "torch_threads": 0,
                 "dtype": "bfloat16", "ops": {"linear": "split-plan mma", "silu": "exp2"}},
        "qualification": {},
        "model_config": {"hidden_size": 64},
        "weights_sha256": "ab" * 32,
        "versions": {"python": "3.12.1", "torch": "2.13", "llguidance": "1.0"},
        "hardware": {"cpu": "some host CPU", "flags": "avx2"},
        "gpu": {"name": "NVIDIA H200", "capability": "9.0", "multiprocessors": "132",
                "driver": "580.1", "cuda": "12.8", "triton": "3.6.0"},
        "specializations": ["linear[q:64x64]"],
        "certificates": {"status": "certified", "digest": "cd" * 32, "units": ["u1"]},
    }  # fmt: skip


def changed(components: dict, path: tuple[str, ...], value) -> dict:
    out = copy.deepcopy(components)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def test_numerics_id_is_stable_and_recorded_on_the_deployment(base, tiny_llama_dir):
    again = build_deployment(load_model(tiny_llama_dir), "invariant", 2)
    assert again.numerics_id == base.numerics_id == fp.numerics_id(base.components)
    assert len(base.numerics_id) == 64 and base.numerics_id != base.fingerprint


def test_fingerprint_is_unchanged_by_the_numerics_split(base):
    assert base.fingerprint == fp.fingerprint(base.components)
    assert "numerics_id" not in base.components


def test_cpu_numerics_change_with_plan_weights_and_config(base, loaded):
    assert build_deployment(loaded, "fast", 2).numerics_id != base.numerics_id
    weights = dict(loaded.weights)
    name = "model.layers.0.self_attn.q_proj.weight"
    w = weights[name].clone()
    w[0, 1] = torch.nextafter(w[0, 1], torch.tensor(float("inf")))
    weights[name] = w
    one_ulp = dataclasses.replace(loaded, weights=weights)
    assert build_deployment(one_ulp, "invariant", 2).numerics_id != base.numerics_id
    cfg = dataclasses.replace(loaded.config, rms_norm_eps=loaded.config.rms_norm_eps * 2)
    other_cfg = dataclasses.replace(loaded, config=cfg)
    assert build_deployment(other_cfg, "invariant", 2).numerics_id != base.numerics_id


def test_cpu_machine_changes_the_fingerprint_not_the_numerics(base):
    comps = changed(changed(base.components, ("versions", "python"), "3.99.0"),
                    ("hardware", "cpu"), "another CPU model")  # fmt: skip
    assert fp.fingerprint(comps) != base.fingerprint
    assert fp.numerics_id(comps) == base.numerics_id


@pytest.mark.parametrize(
    "path", [("versions", "torch_build"), ("versions", "native_kernels_build"),
             ("versions", "numba"), ("hardware", "flags")],
)  # fmt: skip
def test_cpu_plan_build_and_isa_are_numerics(base, path):
    """A CPU plan's bits are not shown independent of its BLAS, native build or ISA."""
    assert fp.numerics_id(changed(base.components, path, "other")) != base.numerics_id


@pytest.mark.parametrize(
    "path", [("gpu", "name"), ("gpu", "driver"), ("gpu", "cuda"), ("gpu", "multiprocessors"),
             ("versions", "python"), ("versions", "torch"), ("hardware", "cpu"),
             ("plan", "num_threads"), ("certificates", "units"), ("certificates", "digest"),
             ("certificates", "status")],
)  # fmt: skip
def test_gpu_machine_is_not_numerics(path):
    comps = gpu_components()
    other = changed(comps, path, "other")
    assert fp.fingerprint(other) != fp.fingerprint(comps)
    assert fp.numerics_id(other) == fp.numerics_id(comps)


@pytest.mark.parametrize(
    "path", [("gpu", "capability"), ("gpu", "triton"), ("plan", "ops", "silu"),
             ("plan", "dtype"), ("specializations",),
             ("weights_sha256",), ("model_config", "hidden_size"), ("versions", "llguidance")],
)  # fmt: skip
def test_gpu_numerics_change_with_what_fixes_the_bits(path):
    comps = gpu_components()
    assert fp.numerics_id(changed(comps, path, "other")) != fp.numerics_id(comps)


def test_gpu_numerics_cover_kernel_sources_and_mma_model(monkeypatch):
    comps = gpu_components()
    ref = fp.numerics_id(comps)
    assert fp.numerics_components(comps)["kernel_sources"] == fp.kernel_sources_digest()
    monkeypatch.setattr(fp, "kernel_sources_digest", lambda: "0" * 64)
    assert fp.numerics_id(comps) != ref
    monkeypatch.undo()
    real = fp.mma_model_definition()
    monkeypatch.setattr(fp, "mma_model_definition", lambda: {**real, "grid": 24})
    assert fp.numerics_id(comps) != ref


def test_machine_components_split_the_rest():
    comps = gpu_components()
    machine = fp.machine_components(comps)
    assert machine["gpu"] == {"name": "NVIDIA H200", "multiprocessors": "132",
                              "driver": "580.1", "cuda": "12.8"}  # fmt: skip
    assert "llguidance" not in machine["versions"]
    numerics = fp.numerics_components(comps)
    assert numerics["architecture"] == "9.0" and numerics["compiler"] == {"triton": "3.6.0"}
    assert "num_threads" not in numerics["plan"]


def test_audit_records_carry_the_numerics_id():
    served = ServedRequest("r", "/v1/completions", None, 1.0, 2.0, [1], {"seed": 1}, [2],
                           ["d"], "stop")  # fmt: skip
    assert request_record(served, "f", "m", "n" * 64)["numerics_id"] == "n" * 64
    assert "numerics_id" not in request_record(served, "f", "m")
    assert session_record("f", "m", {}, 0.0, "n" * 64)["numerics_id"] == "n" * 64
    assert "numerics_id" not in session_record("f", "m", {}, 0.0)


def test_a_passing_mma_probe_keeps_the_numerics_id_and_a_failing_one_changes_it():
    """The start-up MMA probe (kernels/triton/mma_probe.probe_component) is recorded with the
    machine; only a GPU whose probe did not give the emulator's bits gets another numerics id
    (a CPU replay, which assumes those bits, then refuses its logs)."""
    base = gpu_components()
    probe = {"vectors_sha256": "ef" * 32, "outputs": 3072, "mismatches": 0, "status": "equal"}
    passing = {**base, "mma_probe": probe}
    assert fp.numerics_id(passing) == fp.numerics_id(base)
    assert fp.machine_components(passing)["mma_probe"] == probe
    assert fp.fingerprint(passing) != fp.fingerprint(base)
    for status in ("differs", "error: RuntimeError: no kernel"):
        failing = {**base, "mma_probe": {**probe, "mismatches": 5, "status": status}}
        assert fp.numerics_id(failing) != fp.numerics_id(base), status


def test_launch_only_lines_change_the_fingerprint_not_the_numerics():
    """An attention launch retuned (tile height, warps: no bits) keeps the numerics id, so the
    logs served before verify; the definition's line still changes it."""
    from samebits.kernels.triton.describe import describe

    assert set(fp.LAUNCH_ONLY_OPS) <= set(describe())
    comps = changed(gpu_components(), ("plan", "ops"), describe())
    relaunched = changed(comps, ("plan", "ops", "attention_launch"), "block_m 256 on 16 warps")
    assert fp.fingerprint(relaunched) != fp.fingerprint(comps)
    assert fp.numerics_id(relaunched) == fp.numerics_id(comps)
    redefined = changed(comps, ("plan", "ops", "attention"), "key tiles of 128")
    assert fp.numerics_id(redefined) != fp.numerics_id(comps)
