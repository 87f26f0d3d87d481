"""``--model random:<preset>[:seed<n>]``: a preset's random weights drawn by the CPU's
generators whatever the target, so a GPU deployment and the CPU replay of its log load the
same values under the same weights identity."""

from __future__ import annotations

import argparse

import pytest
import torch

from samebits.audit.cli import replay_engine_args
from samebits.audit.reader import LogContents, LoggedEntry
from samebits.model import ModelLoadError, WeightTarget, load_model, weights_target
from samebits.model.random_init import random_model


def _bits(t: torch.Tensor) -> bytes:
    return t.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes()


def test_a_spec_loads_the_presets_random_weights():
    loaded = load_model("random:tiny-llama:seed3")
    direct = random_model("tiny-llama", 3, "cpu", torch.float32)
    assert loaded.name == "random:tiny-llama:seed3"
    assert loaded.weights_identity == direct.weights_identity
    assert loaded.weights.keys() == direct.weights.keys()
    assert all(_bits(loaded.weights[k]) == _bits(direct.weights[k]) for k in direct.weights)
    assert (
        load_model("random:tiny-llama").weights_identity
        == random_model("tiny-llama", 0).weights_identity
    )


def test_a_device_target_gets_the_cpu_draws_and_the_replay_identity():
    """Moved to another device (meta stands in for cuda here), the weights and identity
    are the replay plan's: drawn on the CPU in the GPU plan's dtype."""
    replay = load_model(
        "random:tiny-qwen3:seed1", weights_to=weights_target("cpu", "bfloat16", "replay")
    )
    moved = load_model("random:tiny-qwen3:seed1", weights_to=WeightTarget("meta", "bfloat16"))
    assert moved.weights_identity == replay.weights_identity
    assert {w.device.type for w in moved.weights.values()} == {"meta"}
    assert {w.dtype for w in replay.weights.values()} == {torch.bfloat16}
    assert replay.weights_identity != load_model("random:tiny-qwen3:seed1").weights_identity


@pytest.mark.parametrize("spec", ["random:", "random:tiny-llama:7", "random:tiny-llama:seedx",
                                  "random:no-such-preset"])  # fmt: skip
def test_a_bad_spec_is_a_clear_error(spec):
    with pytest.raises(ModelLoadError, match="random:|unknown preset"):
        load_model(spec)


def test_verify_keeps_a_logged_random_spec():
    """A log of ``--model random:...`` replays with that model, not the default one."""
    session = {"type": "session", "engine_args": {"model": "random:tiny-llama:seed2"}}
    contents = LogContents(entries=[LoggedEntry("log.jsonl", 1, session)])
    args = argparse.Namespace(model=None, device=None, kernel_plan=None)
    assert replay_engine_args(contents, args)["model"] == "random:tiny-llama:seed2"


def test_serve_logs_a_random_spec_as_given_and_a_path_absolute(tmp_path, monkeypatch):
    from samebits.server.cli import session_engine_args

    fields = dict(kernel_plan=None, device=None, dtype=None, num_threads=None, max_model_len=None)
    spec = argparse.Namespace(model="random:llama-3-8b:seed1", **fields)
    assert session_engine_args(spec)["model"] == "random:llama-3-8b:seed1"
    monkeypatch.chdir(tmp_path)
    relative = argparse.Namespace(model="ckpt", **fields)
    assert session_engine_args(relative)["model"] == str(tmp_path / "ckpt")
