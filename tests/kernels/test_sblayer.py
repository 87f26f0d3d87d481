"""sblayer.c (one C call per decoder layer) against the op-by-op forward: bit for bit the
same logits (every sampled row's digest and token) and the same K/V in every slot, over
chunked prefills, mixed prefill/decode steps and decode batches; on a float32 checkpoint and on
the embedded Q4_1 GGUF. Models it does not cover (a qkv bias, q / k norms) keep the op-by-op
path."""

from __future__ import annotations

import numpy as np
import pytest

from samebits import SamplingParams
from samebits.deployment import build_deployment
from samebits.engine.engine import LLMEngine
from samebits.kernels.cpu import native
from samebits.kernels.cpu.sblayer import covers
from samebits.model import load_model

pytestmark = pytest.mark.skipif(not native.available(), reason="no C compiler here")


def _run(dep, fuse: bool, prompts) -> tuple[list, list[bytes]]:
    """Outputs of a fresh engine (a 24-token budget cuts prompts into chunks and mixes
    prefill with decode) and its KV cache's bytes."""
    dep.model.fuse_layers = fuse
    engine = LLMEngine.from_deployment(
        dep, num_kv_blocks=64, block_size=16, max_num_seqs=4, max_num_batched_tokens=24
    )
    params = SamplingParams(max_tokens=6, temperature=0.0, ignore_eos=True)
    for i, prompt in enumerate(prompts):
        engine.add_request(str(i), prompt, params)
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[out.request_id] = out.outputs[0]
    fused = getattr(dep.model, "_fused", None)
    assert (fused is not None and fused[1] is not None) == fuse  # the path that ran
    kv = engine.runner.kv_cache
    caches = [t.numpy().tobytes() for t in (*kv.k, *kv.v)]
    return [(done[k].token_ids, done[k].logits_digests) for k in sorted(done)], caches


def _prompts(dep) -> list[list[int]]:
    rng = np.random.default_rng(3)
    return [rng.integers(3, dep.config.vocab_size, n).tolist() for n in (5, 31, 17, 48, 2)]


def _check(dep, prefetch: bool = True) -> None:
    """Also with the next layer's K / V prefetch switched off (a hint: never a bit)."""
    assert covers(dep.model)
    prompts = _prompts(dep)
    op_by_op = _run(dep, False, prompts)
    native.library().sb_layer_set_prefetch(prefetch)
    try:
        fused = _run(dep, True, prompts)
    finally:
        native.library().sb_layer_set_prefetch(True)
    assert fused[0] == op_by_op[0]
    assert fused[1] == op_by_op[1]


@pytest.mark.parametrize("arch,prefetch", [("llama", True), ("llama", False), ("mistral", True)])
def test_fused_layers_equal_op_by_op(arch, prefetch, request):
    path = request.getfixturevalue(f"tiny_{arch}_dir")
    _check(build_deployment(load_model(path), "invariant", num_threads=2), prefetch)


def test_fused_layers_pass_the_attention_span(tiny_llama_dir):
    """With spans of 32 keys (the prompts of 31 and 48 tokens and their decodes cross them)
    the fused layers still equal op by op, and the span changes bits: it reaches sblayer.c."""
    model = load_model(tiny_llama_dir)
    default = build_deployment(model, "invariant", num_threads=2)
    dep = build_deployment(model, "invariant", num_threads=2)
    dep.model.ops.span = 32
    _check(dep)
    assert _run(dep, True, _prompts(dep))[0] != _run(default, True, _prompts(dep))[0]


def test_fused_layers_equal_op_by_op_on_the_q4_1_gguf(smollm2_model):
    _check(build_deployment(smollm2_model, "invariant", num_threads=2))


@pytest.mark.parametrize("arch", ["qwen2", "qwen3"])
def test_models_it_does_not_cover_run_op_by_op(arch, request):
    dep = build_deployment(load_model(request.getfixturevalue(f"tiny_{arch}_dir")), "invariant")
    assert not covers(dep.model)
    engine = LLMEngine.from_deployment(dep, num_kv_blocks=16)
    engine.add_request("0", [5, 6, 7], SamplingParams(max_tokens=2, temperature=0.0))
    while engine.has_unfinished_requests():
        engine.step()
    assert dep.model._fused[1] is None
