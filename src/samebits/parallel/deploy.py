"""`build_parallel_deployment`: the Deployment of a tensor-parallel engine on rank 0 (or, on
a torchrun rank > 0, that rank's serving loop).

The fingerprint is the TP = 1 one: the same plan, model config, weights digest and
qualification keys (the sharded linears report full shapes); the degree is recorded as
`components["topology"]` after hashing (topology, not numerics: the bits do not depend on it).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch.distributed as dist

from samebits.deployment import Deployment, _certificates, _specializations, qualify_model
from samebits.kernels.fingerprint import fingerprint, fingerprint_components, weights_digest
from samebits.kernels.plan import build_plan
from samebits.parallel.comm import Group, free_port
from samebits.parallel.linear import row_splits
from samebits.parallel.model import TensorParallelModel, build_rank_model
from samebits.parallel.shard import check_shardable, local_config
from samebits.parallel.topology import (
    TensorParallelError,
    Topology,
    backend_for,
    check_degree,
    torchrun_env,
)  # fmt: skip
from samebits.parallel.worker import Workers, model_source, serve


@dataclass
class ParallelDeployment(Deployment):
    """A Deployment whose model is rank 0's `TensorParallelModel`; `close()` stops the ranks."""

    tensor_parallel_size: int = 1

    def close(self) -> None:
        self.model.close()


def build_parallel_deployment(loaded, config, release_sources: bool = False) -> Deployment:
    """Check, start the ranks (or join torchrun's), build rank 0's shard and fingerprint.
    ValueError (before any process starts) for a degree or a model that cannot be sharded."""
    degree = check_degree(config.runtime_config.tensor_parallel_size)
    plan = rank_plan(loaded.config, config)
    check_parallel(loaded.config, plan, degree)
    if dist.is_initialized():
        raise TensorParallelError(
            "a tensor-parallel engine is already running in this process: close it first "
            "(LLM.close())"
        )
    device = config.model_config.device
    env = torchrun_env(degree)
    if env is not None and device == "cuda":  # one GPU per torchrun process
        import torch

        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", env[0])))
    if env is not None and env[0] > 0:  # a torchrun rank > 0 serves, then its process ends
        serve(Group(Topology(env[0], degree, backend_for(device), "torchrun"), "env://"),
              config, loaded)  # fmt: skip
        raise SystemExit(0)
    workers = None
    if env is None:
        port = free_port()
        workers = Workers.spawn(config, degree, port, model_source(loaded))
        init, launcher = f"tcp://127.0.0.1:{port}", "spawn"
    else:
        init, launcher = "env://", "torchrun"
    try:
        group = Group(Topology(0, degree, backend_for(device), launcher), init)
    except BaseException:
        if workers is not None:  # a rank that never joined: name it, then stop the others
            try:
                workers.check(_Failure(), wait_s=5.0)
            finally:
                workers.join(5.0)
        raise
    return _rank0(loaded, config, group, workers, plan)


def _rank0(loaded, config, group: Group, workers, plan) -> ParallelDeployment:
    model = None
    try:
        local, limit, qualification, digest = prepare_rank(loaded, config, group)
        model = TensorParallelModel(local, group, workers)
    except BaseException as exc:
        if workers is not None and isinstance(exc, RuntimeError):
            workers.check(_Failure(), wait_s=5.0)  # names the rank that failed, if one did
        if workers is not None:
            workers.join(5.0)
        group.destroy()
        raise
    certificates = _certificates(plan, loaded)
    components = fingerprint_components(
        plan, loaded.config, digest, qualification, _specializations(plan, local), certificates
    )
    fp = fingerprint(components)
    components["topology"] = group.topology.to_dict()  # recorded, not hashed
    return ParallelDeployment(
        loaded, plan, model, limit, qualification, components, fp, group.world_size
    )


class _Failure:
    failure = None


def rank_plan(cfg, config):
    """The kernel plan every rank builds (the one TP = 1 builds: same facts)."""
    mc, rc = config.model_config, config.runtime_config
    return build_plan(
        mc.kernel_plan, rc.num_threads, head_dim=cfg.head_dim,
        group=cfg.num_attention_heads // cfg.num_key_value_heads, device=mc.device,
        dtype=mc.dtype, moe=cfg.moe is not None,
    )  # fmt: skip


def check_parallel(cfg, plan, degree: int) -> None:
    """ValueError unless `plan` and the model can run sharded at `degree` with TP = 1 bits."""
    check_shardable(cfg, degree)
    if plan.name != "invariant":
        raise ValueError("tensor parallelism runs the invariant kernel plan only")
    if plan.device == "cpu" and plan.linear_kernel != "sbgemm":
        raise ValueError(
            "tensor parallelism on the CPU needs the sbgemm kernel (the native C kernels); "
            f"this plan runs {plan.linear_kernel}"
        )
    shapes = {"o": (cfg.hidden_size, cfg.q_size), "down": (cfg.hidden_size, cfg.intermediate_size)}
    for role, (n, k) in shapes.items():
        splits = row_splits(plan, n, k, role)
        if splits % degree:
            raise ValueError(
                f"the split plan of {role} [{n} x {k}] has {splits} K ranges; "
                f"tensor_parallel_size {degree} does not divide it"
            )


def prepare_rank(loaded, config, group: Group):
    """This rank's (model, context length, qualification, weights digest), after checking
    with every rank that all loaded the same weights and qualified their kernels. Every
    rank runs it (the collectives match)."""
    cfg = loaded.config
    plan = rank_plan(cfg, config)
    if plan.device == "cuda" and plan.name == "invariant":
        plan = plan.with_op_by_op(_gate_local(loaded, group.world_size))
    max_len = config.model_config.max_model_len
    limit = min(max_len or cfg.max_context_len, cfg.max_context_len)
    digest = loaded.weights_identity or weights_digest(loaded.weights)
    model = build_rank_model(loaded, plan, group, limit)
    qualification = qualify_model(model)
    reports = group.gather_objects((digest, qualification))
    for rank, (other, _) in enumerate(reports):
        if other != digest:
            raise TensorParallelError(
                f"rank {rank} loaded other weights (digest {other[:16]}) than rank "
                f"{group.rank} ({digest[:16]}): every rank must load the same model"
            )
    return model, limit, qualification, digest


def _gate_local(loaded, degree: int) -> dict:
    """The GPU plan deploys certified kernels only: the shard's shapes (heads / degree) too."""
    from samebits.kernels.triton.certified import gate, units

    local = local_config(loaded.config, degree)
    return gate.gate(
        units.units_for(units.dims_of(local)), model_hint=getattr(loaded, "name", "<model>")
    )
