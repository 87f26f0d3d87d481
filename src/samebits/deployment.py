"""A Deployment: loaded weights + KernelPlan + decoder + fingerprint, built once at start-up."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from samebits.kernels.cpu.linear import TiledLinear, qualify
from samebits.kernels.cpu.sbgemm import SbLinear
from samebits.kernels.fingerprint import fingerprint, fingerprint_components, weights_digest
from samebits.kernels.plan import KernelPlan, build_plan
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
        if not isinstance(lin, (TiledLinear, SbLinear)):
            continue
        key = f"linear[{lin.shape[0]}x{lin.shape[1]}]"
        if key not in results:
            results[key] = qualify(lin)
    failed = [k for k, ok in results.items() if not ok]
    if failed:
        raise KernelQualificationError(
            f"row-invariance probe failed for {failed}; this linear kernel / thread setup cannot "
            "run the invariant plan (try num_threads=1)"
        )
    return results


def build_deployment(
    loaded, kernel_plan: str = "invariant", num_threads: int | None = None,
    max_model_len: int | None = None, release_sources: bool = False,
) -> Deployment:  # fmt: skip
    """Build the plan and decoder for `loaded` (a LoadedModel) and fingerprint the result.

    With `release_sources` the projection weights are dropped from `loaded.weights` as the
    kernels take their own copies (only for a caller that owns `loaded`); the weights digest
    is taken before."""
    cfg = loaded.config
    group = cfg.num_attention_heads // cfg.num_key_value_heads
    plan = build_plan(kernel_plan, num_threads, head_dim=cfg.head_dim, group=group)
    limit = min(max_model_len or cfg.max_position_embeddings, cfg.max_position_embeddings)
    digest = weights_digest(loaded.weights)
    model = DecoderModel(cfg, loaded.weights, plan, limit, release_sources, loaded.quantized)
    qualification = qualify_model(model)
    components = fingerprint_components(plan, cfg, digest, qualification)
    return Deployment(
        loaded, plan, model, limit, qualification, components, fingerprint(components)
    )


def cold_logits(deployment: Deployment, token_ids, all_rows: bool = False):
    """Cold, batch-of-one, no-cache forward over `token_ids` (the spec's Ref).

    Returns the float32 logits of the last position as a numpy row, or of every position
    ([len, vocab]) with `all_rows`. Uses a fresh KV cache with an identity block table.
    """
    import torch

    from samebits.engine.runner import build_flat_batch
    from samebits.engine.scheduler import ScheduledRequest

    n = len(token_ids)
    block = 16
    num_blocks = -(-n // block)
    ids = tuple(int(t) for t in token_ids)
    req = ScheduledRequest("ref", ids, 0, tuple(range(num_blocks)), sample=True)
    batch = build_flat_batch([req], block)
    if all_rows:
        batch = dataclasses.replace(batch, logits_indices=torch.arange(n))
    kv = deployment.model.new_kv_cache(num_blocks * block)
    logits = deployment.model.forward(batch, kv).numpy()
    return logits if all_rows else logits[-1]
