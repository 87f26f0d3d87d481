"""A Deployment: loaded weights + KernelPlan + decoder + fingerprint, built once at start-up."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cached_property

from samebits.kernels.cpu.linear import TiledLinear, qualify
from samebits.kernels.cpu.sbgemm import SbLinear
from samebits.kernels.fingerprint import (
    fingerprint,
    fingerprint_components,
    numerics_id,
    weights_digest,
)
from samebits.kernels.plan import KernelPlan, build_plan
from samebits.model.gemma3 import Gemma3Model
from samebits.model.llama import DecoderModel


class KernelQualificationError(RuntimeError):
    """The BLAS library failed the start-up row-invariance probe for a weight shape."""


@dataclass
class Deployment:
    """Everything that fixes the logits bits. `fingerprint` names it (hex SHA-256)."""

    loaded: object  # samebits.model.LoadedModel
    plan: KernelPlan
    model: DecoderModel
    max_model_len: int
    qualification: dict[str, bool]
    components: dict
    fingerprint: str

    @cached_property
    def numerics_id(self) -> str:
        """What fixes the bits, without the machine (`kernels.fingerprint.numerics_id`)."""
        return numerics_id(self.components)

    @property
    def tokenizer(self):
        return self.loaded.tokenizer

    @property
    def config(self):
        return self.loaded.config


def qualify_model(model: DecoderModel) -> dict[str, bool]:
    """Run the linear probe once per distinct weight shape; raise if any fails."""
    results: dict[str, bool] = {}
    for lin in model.linears():
        probe = _probe_for(lin)
        if probe is None:
            continue
        key = f"linear[{lin.shape[0]}x{lin.shape[1]}]"
        if key not in results:
            results[key] = probe()
    failed = [k for k, ok in results.items() if not ok]
    if failed:
        raise KernelQualificationError(
            f"row-invariance probe failed for {failed}; this linear kernel / thread setup cannot "
            "run the invariant plan (try num_threads=1)"
        )
    return results


def _probe_for(lin):
    """The start-up row-invariance probe of a linear kernel (a no-argument callable returning
    pass/fail), or None where the kernel has nothing to qualify (stock torch)."""
    if isinstance(lin, (TiledLinear, SbLinear)):
        return lambda: qualify(lin)
    return getattr(lin, "qualify", None)


def build_deployment(
    loaded, kernel_plan: str = "invariant", num_threads: int | None = None,
    max_model_len: int | None = None, release_sources: bool = False, device: str = "cpu",
    dtype: str | None = None,
) -> Deployment:  # fmt: skip
    """Build the plan and decoder for `loaded` (a LoadedModel) and fingerprint the result.

    With `release_sources` the projection weights are dropped from `loaded.weights` as the
    kernels take their own copies (only for a caller that owns `loaded`); the weights digest
    is taken before. `device` "cuda" builds the GPU plan (`dtype` default "bfloat16").
    The context is `max_model_len`, capped at (and by default) the model's `max_context_len`
    (`max_position_embeddings`; with yarn scaling at least original x factor)."""
    cfg = loaded.config
    group = cfg.num_attention_heads // cfg.num_key_value_heads
    plan = build_plan(
        kernel_plan, num_threads, head_dim=cfg.head_dim, group=group, device=device, dtype=dtype,
        moe=cfg.moe is not None,
    )  # fmt: skip
    certificates = _certificates(plan, loaded)  # before any weight moves: fail fast
    plan = plan.with_op_by_op(certificates)
    limit = min(max_model_len or cfg.max_context_len, cfg.max_context_len)
    digest = loaded.weights_identity or weights_digest(loaded.weights)
    decoder = Gemma3Model if cfg.gemma3 is not None else DecoderModel
    model = decoder(cfg, loaded.weights, plan, limit, release_sources, loaded.quantized)
    qualification = qualify_model(model)
    replays = None
    if plan.name == "replay":
        from samebits.kernels.replay.components import replayed_components

        replays, certificates = replayed_components(plan, model, certificates), None
    components = fingerprint_components(
        plan, cfg, digest, qualification, _specializations(plan, model), certificates, replays,
        _mma_probe(plan),
    )  # fmt: skip
    return Deployment(
        loaded, plan, model, limit, qualification, components, fingerprint(components)
    )


def _mma_probe(plan: KernelPlan) -> dict | None:
    """The GPU invariant plan's start-up MMA qualification (`kernels/triton/mma_probe.py`);
    a result other than "equal" is announced on stderr (the deployment still serves)."""
    if (plan.device, plan.name) != ("cuda", "invariant"):
        return None
    from samebits.kernels.triton.mma_probe import probe_component

    probe = probe_component()
    if probe["status"] != "equal":
        print(f"samebits: WARNING: the GPU's MMA probe gave {probe['status']} (of "
              f"{probe.get('outputs', '?')} outputs, {probe.get('mismatches', '?')} differ from "
              "the emulator): its numerics id says so, and a CPU replay refuses its logs",
              file=sys.stderr)  # fmt: skip
    return probe


def _certificates(plan: KernelPlan, loaded) -> dict | None:
    """The GPU invariant plan deploys only certified kernel specializations (fail closed):
    the certificate set's status and digest for the fingerprint, or UncertifiedKernelError
    naming what is missing and the command that makes it (see samebits.kernels.triton.certified
    .gate; SAMEBITS_ALLOW_UNCERTIFIED=1 opts out, loudly, recorded as uncertified)."""
    if (plan.device, plan.name) not in (("cuda", "invariant"), ("cpu", "replay")):
        return None  # a replay computes the GPU plan's bits: the GPU plan's certificates
    from samebits.kernels.triton.certified import gate, units

    hint = getattr(loaded, "name", None) or "<model>"
    return gate.gate(units.units_for(units.dims_of(loaded.config)), model_hint=hint)


def _specializations(plan: KernelPlan, model: DecoderModel) -> list[str]:
    """The GPU plan's compiled linear variants, per (role, N, K) of this model."""
    if plan.device != "cuda" or plan.name != "invariant":
        return []
    from samebits.kernels.triton.backend import linear_specializations

    shapes = [(role, lin.shape[0], lin.shape[1]) for role, lin in model.role_linears()]
    return linear_specializations(shapes)
