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


def test_moe_deployment_names_its_moe_config_and_kernels(tiny_qwen3_moe_dir):
    """The fingerprint of a mixture of experts covers its MoE config (experts, top-k,
    renormalization, sparse-layer layout) and names the MoE router and experts' kernels."""
    loaded = load_model(tiny_qwen3_moe_dir)
    dep = build_deployment(loaded, "invariant", 2)
    assert dep.components["model_config"]["moe"]["num_experts_per_tok"] == 3
    assert {"moe_router", "moe_experts"} <= dep.components["plan"]["ops"].keys()
    fast = build_deployment(loaded, "fast", 2).components["plan"]["ops"]
    assert "index_add_" in fast["moe_experts"]
    moe = dataclasses.replace(loaded.config.moe, norm_topk_prob=False)
    changed = dataclasses.replace(loaded, config=dataclasses.replace(loaded.config, moe=moe))
    assert build_deployment(changed, "invariant", 2).fingerprint != dep.fingerprint


def test_dense_plans_name_no_moe_kernels(base):
    assert "moe_router" not in base.components["plan"]["ops"]
    assert "moe" not in base.components["model_config"]
