"""Engine assembly: a resolved `EngineConfig` -> deployment (loaded model, kernel plan,
fingerprint) -> scheduler, KV cache and runner. The config is built once by the caller
(`LLMEngine.from_*`) and only resolved here: every None it holds (dtype, context length, KV
blocks, threads, async scheduling) is filled in from what the deployment actually uses.

Torch is imported only inside the functions that load or build (the engine core stays
torch-free at import time).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from samebits.config import (
    DEFAULT_NUM_KV_BLOCKS,
    DEVICE_DTYPES,
    KERNEL_PLANS,
    KWARG_PARTS,
    EngineConfig,
    build_config,
    plan_dtypes,
    resolved,
    resolved_parts,
)
from samebits.engine.scheduler import Scheduler

# A memory-sized KV cache holds at most this many times what max_num_seqs full-length
# sequences need (the rest serves the prefix cache); a tiny model on a large GPU would
# otherwise get tens of millions of blocks, each a Python object in the block pool.
KV_BLOCKS_PER_SEQUENCE_SLOT = 4


def load(cfg: EngineConfig, progress: bool) -> Any:
    """The config's model, loaded with its weights placed for the config's device / dtype
    (ValueError before anything is loaded when the device is missing)."""
    from samebits.model import load_model, weights_target

    mc = cfg.model_config
    mc.check_device()
    target = weights_target(mc.device, _dtype(cfg), mc.kernel_plan)
    return load_model(mc.model, progress=progress, weights_to=target)


def deploy(loaded: Any, cfg: EngineConfig, release_sources: bool) -> Any:
    """The deployment (plan, decoder, fingerprint) of an already loaded model under the
    config's model settings (`model_config.model` is not used: `loaded` is the model).
    `release_sources`: the deployment owns `loaded` and may drop weights the kernels copied."""
    from samebits.deployment import build_deployment

    mc, rc = cfg.model_config, cfg.runtime_config
    mc.check_device()
    if rc.tensor_parallel_size > 1:  # one process per rank (samebits.parallel)
        from samebits.parallel.deploy import build_parallel_deployment

        return build_parallel_deployment(loaded, cfg, release_sources)
    return build_deployment(
        loaded, mc.kernel_plan, rc.num_threads, mc.max_model_len, release_sources,
        mc.device, _dtype(cfg),
    )  # fmt: skip


def deployment_config(
    deployment: Any, config: EngineConfig | None, kwargs: dict[str, Any]
) -> EngineConfig:
    """`build_config(config, **kwargs)` on the deployment's device: a config for another
    device (the default one is for the cpu) moves to it as `EngineConfig.replace` does, so
    scheduler budgets not given in `kwargs` and left at the old device's defaults take the
    deployment device's (`SCHEDULER_DEFAULTS`); a value given is kept."""
    base = build_config(config)
    device = _plan_settings(deployment.plan).get("device")
    if device is not None and device != base.model_config.device:
        kwargs = {"device": device, **kwargs}
    return build_config(base, **kwargs)


def check_deployment_kwargs(kwargs: dict[str, Any]) -> None:
    """TypeError for keywords a built deployment already fixes (its model settings)."""
    misplaced = sorted(k for k in kwargs if KWARG_PARTS.get(k) == "model_config")
    misplaced += [k for k in ("num_threads", "tensor_parallel_size") if k in kwargs]
    if misplaced:
        raise TypeError(
            f"from_deployment got {', '.join(map(repr, misplaced))}: the deployment "
            "already fixes them (use from_loaded / from_args)"
        )


def assemble(deployment: Any, cfg: EngineConfig) -> tuple[EngineConfig, Any, Scheduler]:
    """(resolved config, runner, scheduler) over a built deployment (cheap on the CPU; on a
    GPU the decode graphs are captured here unless `enforce_eager`). The deployment's model
    settings (plan, device, dtype, context length, threads) are what it was built with,
    whatever the config says; the KV cache size is resolved by `num_kv_blocks`."""
    asked = cfg.scheduler_config.max_model_len
    if asked is not None and asked != deployment.max_model_len:
        raise ValueError(
            f"scheduler_config.max_model_len {asked} differs from the deployment's context "
            f"length {deployment.max_model_len}: set model_config.max_model_len instead"
        )
    cfg = resolve(deployment, cfg)
    if deployment.components.get("certificates"):  # a certified GPU plan: certified pages
        from samebits.kernels.triton.certified import gate

        gate.check_block_size(deployment, cfg.cache_config.block_size)
        gate.check_rows_bound(deployment, max(cfg.max_num_batched_tokens, cfg.max_num_seqs))
        blocks = resolved(cfg.cache_config.num_kv_blocks, "num_kv_blocks")
        gate.check_attention_bounds(deployment, deployment.max_model_len, blocks)
    salt = bytes.fromhex(deployment.fingerprint)
    scheduler = Scheduler.from_configs(cfg.cache_config, cfg.scheduler_config, salt)
    return cfg, _runner(deployment, cfg), scheduler


def resolve(deployment: Any, cfg: EngineConfig) -> EngineConfig:
    """The config with every None filled in from the deployment (see the module docstring)."""
    plan = deployment.plan
    cfg = resolved_parts(
        cfg, **_plan_settings(plan), max_model_len=deployment.max_model_len,
        num_threads=plan.num_threads or None,  # GPU plans run no CPU kernel threads (0)
        tensor_parallel_size=getattr(deployment, "tensor_parallel_size", 1),
        num_kv_blocks=num_kv_blocks(deployment, cfg),
        async_scheduling=_async_scheduling(plan.device, cfg),
    )  # fmt: skip
    sched = dataclasses.replace(cfg.scheduler_config, max_model_len=deployment.max_model_len)
    return dataclasses.replace(cfg, scheduler_config=sched)


def _runner(deployment: Any, cfg: EngineConfig) -> Any:
    """The `ModelRunner` (torch) over the deployment's model, with its KV cache and graphs."""
    from samebits.engine.runner import ModelRunner
    from samebits.graphs.policy import graph_config

    cache = cfg.cache_config
    eager = cfg.runtime_config.enforce_eager or cfg.runtime_config.tensor_parallel_size > 1
    graphs = graph_config(deployment.plan.device, eager, cfg.max_num_seqs)
    blocks = resolved(cache.num_kv_blocks, "num_kv_blocks")
    return ModelRunner(deployment.model, cache.block_size, blocks, graphs, deployment.max_model_len)


def num_kv_blocks(deployment: Any, cfg: EngineConfig) -> int:
    """The KV cache's block count: `num_kv_blocks` when set; else on a GPU what fits in
    `gpu_memory_utilization` of its memory, capped at KV_BLOCKS_PER_SEQUENCE_SLOT times what
    `max_num_seqs` full-length sequences need; else (CPU) DEFAULT_NUM_KV_BLOCKS."""
    cache = cfg.cache_config
    if cache.num_kv_blocks is not None:
        return cache.num_kv_blocks
    if deployment.plan.device == "cpu":
        return DEFAULT_NUM_KV_BLOCKS
    from samebits.engine.runner import kv_blocks_for_device

    per_sequence = -(-deployment.max_model_len // cache.block_size)
    useful = KV_BLOCKS_PER_SEQUENCE_SLOT * cfg.max_num_seqs * per_sequence
    fits = kv_blocks_for_device(deployment.model, cache.block_size, cache.gpu_memory_utilization)
    return min(useful, fits)


def _plan_settings(plan: Any) -> dict[str, str]:
    """The deployment's device, dtype and plan name as config values; nothing for a plan the
    config cannot name (a test's interpreter plan): the config's values are kept then."""
    if plan.name not in KERNEL_PLANS or plan.device not in DEVICE_DTYPES:
        return {}
    if plan.dtype not in plan_dtypes(plan.device, plan.name):
        return {}
    return {"device": plan.device, "dtype": plan.dtype, "kernel_plan": plan.name}


def _async_scheduling(device: str, cfg: EngineConfig) -> bool:
    """The config's `async_scheduling`; None: on for a GPU, off for the CPU."""
    asked = cfg.runtime_config.async_scheduling
    return device != "cpu" if asked is None else asked


def _dtype(cfg: EngineConfig) -> str:
    return resolved(cfg.model_config.dtype, "dtype")
