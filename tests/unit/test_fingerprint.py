"""The deployment fingerprint: identical across builds of the same deployment, different
when the plan, the weights (one ulp), the config, the threads, versions or hardware change."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from samebits.deployment import build_deployment
from samebits.kernels import fingerprint as fp
from samebits.model import load_model


@pytest.fixture(scope="module")
def loaded(tiny_llama_dir):
    return load_model(tiny_llama_dir)


@pytest.fixture(scope="module")
def base(loaded):
    return build_deployment(loaded, "invariant", 2)


def test_stable_across_builds_and_loads(base, tiny_llama_dir):
    again = build_deployment(load_model(tiny_llama_dir), "invariant", 2)
    assert again.fingerprint == base.fingerprint
    assert len(base.fingerprint) == 64


def test_changes_with_plan_and_threads(base, loaded):
    assert build_deployment(loaded, "fast", 2).fingerprint != base.fingerprint
    assert build_deployment(loaded, "invariant", 1).fingerprint != base.fingerprint


def test_changes_with_one_ulp_of_one_weight(base, loaded):
    weights = dict(loaded.weights)
    name = "model.layers.1.mlp.down_proj.weight"
    w = weights[name].clone()
    w[3, 5] = torch.nextafter(w[3, 5], torch.tensor(float("inf")))
    weights[name] = w
    changed = dataclasses.replace(loaded, weights=weights)
    assert build_deployment(changed, "invariant", 2).fingerprint != base.fingerprint


def test_changes_with_config(base, loaded):
    cfg = dataclasses.replace(loaded.config, rms_norm_eps=loaded.config.rms_norm_eps * 2)
    changed = dataclasses.replace(loaded, config=cfg)
    assert build_deployment(changed, "invariant", 2).fingerprint != base.fingerprint


def test_changes_with_versions_and_hardware(base, loaded, monkeypatch):
    real_versions, real_hw = fp.software_versions, fp.hardware
    monkeypatch.setattr(fp, "software_versions", lambda: {**real_versions(), "torch": "9.9"})
    assert build_deployment(loaded, "invariant", 2).fingerprint != base.fingerprint
    monkeypatch.setattr(fp, "software_versions", real_versions)
    monkeypatch.setattr(fp, "hardware", lambda: {**real_hw(), "cpu": "another CPU"})
    assert build_deployment(loaded, "invariant", 2).fingerprint != base.fingerprint
