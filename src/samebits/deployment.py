"""A Deployment: loaded weights + KernelPlan + decoder + fingerprint, built once at start-up."""

from __future__ import annotations

from dataclasses import dataclass

from samebits.kernels.cpu.linear import TiledLinear, qualify
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
        if not isinstance(lin, TiledLinear):
            continue
        key = "linear[%dx%d]" % lin.shape
        if key not in results:
            results[key] = qualify(lin)
    failed = [k for k, ok in results.items() if not ok]
    if failed:
        raise KernelQualificationError(
            f"BLAS row-invariance probe failed for {failed}; this BLAS/thread setup cannot run "
            "the invariant plan (try num_threads=1)"
        )
    return results


def build_deployment(
    loaded, kernel_plan: str = "invariant", num_threads: int | None = None,
    max_model_len: int | None = None,
) -> Deployment:  # fmt: skip
    """Build the plan and decoder for `loaded` (a LoadedModel) and fingerprint the result."""
    plan = build_plan(kernel_plan, num_threads)
    cfg = loaded.config
    limit = min(max_model_len or cfg.max_position_embeddings, cfg.max_position_embeddings)
    model = DecoderModel(cfg, loaded.weights, plan, limit)
    qualification = qualify_model(model)
    components = fingerprint_components(plan, cfg, weights_digest(loaded.weights), qualification)
    return Deployment(loaded, plan, model, limit, qualification, components, fingerprint(components))
