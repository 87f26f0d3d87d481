"""The backend interface: device / dtype validation, the (device, plan) registry, and the GPU
plan's clear refusal on a machine without CUDA."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from samebits.config import ModelConfig
from samebits.kernels import registry
from samebits.kernels.cpu.ops import FastOps, InvariantOps
from samebits.kernels.plan import build_plan
from samebits.kernels.registry import make_ops


def test_device_defaults_and_bad_values():
    assert ModelConfig().dtype == "float32"
    with pytest.raises(ValueError, match="device must be one of"):
        ModelConfig(device="tpu")
    with pytest.raises(ValueError, match="dtype on cpu"):
        ModelConfig(dtype="bfloat16")


def test_cuda_without_gpu_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        ModelConfig(device="cuda").check_device()
    from samebits.llm import LLM

    with pytest.raises(ValueError, match="no CUDA GPU"):
        LLM(device="cuda")


def test_registry_builds_the_plans_op_sets():
    assert isinstance(make_ops(build_plan("invariant", 1)), InvariantOps)
    fast = make_ops(build_plan("fast", 1))
    assert isinstance(fast, FastOps) and fast.device.type == "cpu"


def test_registry_table_names_importable_factories():
    """Every (device, plan) entry of the static table resolves to a callable factory."""
    for (device, name), target in registry.OPS_FACTORIES.items():
        if target.startswith("samebits.kernels.triton."):
            pytest.importorskip("triton")
        assert callable(registry.factory(device, name)), target


def test_registry_refuses_unknown_pairs():
    plan = dataclasses.replace(build_plan("invariant", 1), name="portable")
    with pytest.raises(ValueError, match="no kernel plan 'portable' for device 'cpu'"):
        make_ops(plan)


def test_kv_blocks_for_memory():
    from samebits.config import kv_blocks_for_memory

    gib = 2**30
    # 100 GiB card, 20 GiB in use (weights): 0.9 * 100 - 20 = 70 GiB for 1 GiB blocks
    assert kv_blocks_for_memory(100 * gib, 80 * gib, 0.9, gib) == 70
    with pytest.raises(ValueError, match="no KV-cache block fits"):
        kv_blocks_for_memory(100 * gib, 5 * gib, 0.9, gib)
    with pytest.raises(ValueError, match="gpu_memory_utilization"):
        kv_blocks_for_memory(100 * gib, 80 * gib, 1.5, gib)


def test_kv_bytes_per_block_counts_layers_heads_and_dtype(tiny_llama_dir):
    from samebits.deployment import build_deployment
    from samebits.engine.runner import kv_bytes_per_block
    from samebits.model import load_model

    dep = build_deployment(load_model(tiny_llama_dir), "invariant", 1)
    cfg = dep.config
    per_token = 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * cfg.head_dim * 4
    assert kv_bytes_per_block(dep.model, 16) == 16 * per_token


def test_memory_sized_kv_cache_is_capped(tiny_llama_dir, monkeypatch):
    """On a GPU plan, `gpu_memory_utilization` (default 0.9) sizes the cache from free memory,
    capped at KV_BLOCKS_PER_SEQUENCE_SLOT x what max_num_seqs full sequences need;
    `num_kv_blocks` given wins."""
    from samebits.deployment import build_deployment
    from samebits.engine import runner
    from samebits.engine.assembly import KV_BLOCKS_PER_SEQUENCE_SLOT
    from samebits.engine.engine import LLMEngine
    from samebits.model import load_model

    dep = build_deployment(load_model(tiny_llama_dir), "invariant", 1)
    gpu_like = dataclasses.replace(
        dep, plan=dataclasses.replace(dep.plan, device="cuda", dtype="bfloat16")
    )
    monkeypatch.setattr(runner, "kv_blocks_for_device", lambda *a: 10**7)
    engine = LLMEngine.from_deployment(gpu_like, max_num_seqs=4, gpu_memory_utilization=0.9)
    cap = KV_BLOCKS_PER_SEQUENCE_SLOT * 4 * -(-dep.max_model_len // 16)
    assert engine.scheduler.num_kv_blocks == cap
    monkeypatch.setattr(runner, "kv_blocks_for_device", lambda *a: 100)
    assert (
        LLMEngine.from_deployment(gpu_like, gpu_memory_utilization=0.9).scheduler.num_kv_blocks
        == 100
    )
    assert LLMEngine.from_deployment(gpu_like).scheduler.num_kv_blocks == 100
    engine = LLMEngine.from_deployment(gpu_like, num_kv_blocks=7)
    assert engine.scheduler.num_kv_blocks == engine.config.cache_config.num_kv_blocks == 7
