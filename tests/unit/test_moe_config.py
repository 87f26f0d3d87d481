"""Mixture-of-experts configs: what qwen3_moe / mixtral config.json fields become (`MoeConfig`,
which layers are sparse, the weight names), and clear errors naming the field for MoE configs
samebits does not run (shared experts, grouped routing) or bad values."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from samebits.model import ModelLoadError, load_model
from samebits.model.checkpoint import expected_weight_shapes
from samebits.model.config import MoeConfig, model_config_from_hf
from samebits.model.presets import PRESETS


def _raw(folder: Path) -> dict:
    return json.loads((folder / "config.json").read_text())


def test_qwen3_moe_layout_with_dense_layers(tiny_qwen3_moe_mixed_dir):
    cfg = model_config_from_hf(_raw(tiny_qwen3_moe_mixed_dir))
    assert cfg.moe == MoeConfig(6, 2, 32, False, decoder_sparse_step=2, mlp_only_layers=(3,))
    assert [cfg.is_sparse(i) for i in range(4)] == [False, True, False, False]
    assert cfg.has_dense_layers and cfg.qk_norm
    names = expected_weight_shapes(cfg)
    assert names["model.layers.1.mlp.gate.weight"] == (6, 64)
    assert names["model.layers.1.mlp.experts.5.down_proj.weight"] == (64, 32)
    assert names["model.layers.3.mlp.down_proj.weight"] == (64, 128)
    assert "model.layers.1.mlp.down_proj.weight" not in names
    assert "model.layers.3.mlp.gate.weight" not in names


def test_mixtral_names_and_routing(tiny_mixtral_dir):
    cfg = model_config_from_hf(_raw(tiny_mixtral_dir))
    assert cfg.moe == MoeConfig(8, 2, 32, norm_topk_prob=True)
    assert not cfg.has_dense_layers and not cfg.qk_norm
    names = expected_weight_shapes(cfg)
    prefix = "model.layers.0.block_sparse_moe."
    assert names[prefix + "gate.weight"] == (8, 64)
    assert (
        names[prefix + "experts.7.w1.weight"] == names[prefix + "experts.7.w3.weight"] == (32, 64)
    )
    assert names[prefix + "experts.7.w2.weight"] == (64, 32)


def test_num_experts_under_either_name():
    raw = {**_qwen3_moe_raw(), "num_experts": 8}
    del raw["num_local_experts"]
    assert model_config_from_hf(raw).moe.num_experts == 8


def _qwen3_moe_raw() -> dict:
    """A qwen3_moe config.json as transformers 5 writes it (`num_local_experts`)."""
    return dict(
        model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"], vocab_size=320,
        hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
        num_local_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[], use_sliding_window=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"model_type": "qwen2_moe", "architectures": []}, "shared_expert_intermediate_size"),
        ({"model_type": "deepseek_v3", "architectures": []}, "n_shared_experts"),
        ({"shared_expert_intermediate_size": 256}, "shared_expert_intermediate_size=256"),
        ({"n_shared_experts": 1}, "n_shared_experts=1"),
        ({"num_experts_per_tok": 9}, "num_experts_per_tok (9) must be at most num_experts (8)"),
        ({"num_experts_per_tok": 0}, "num_experts_per_tok must be a positive int"),
        ({"num_local_experts": None}, "'num_experts' is missing"),
        ({"moe_intermediate_size": None}, "'moe_intermediate_size' is missing"),
        ({"norm_topk_prob": "yes"}, "norm_topk_prob must be a bool"),
        ({"decoder_sparse_step": 0}, "decoder_sparse_step must be a positive int"),
        ({"mlp_only_layers": 3}, "mlp_only_layers must be a list"),
        ({"mlp_only_layers": [-1]}, "mlp_only_layers must be a tuple of distinct layer indices"),
        ({"architectures": ["MixtralForCausalLM"]}, "'MixtralForCausalLM' is not supported"),
    ],
)
def test_bad_moe_config(changes, reason):
    raw = {**_qwen3_moe_raw(), **changes}
    with pytest.raises(ValueError) as info:
        model_config_from_hf(raw)
    assert reason in str(info.value)


def test_moe_config_only_for_moe_model_types():
    dense = PRESETS["tiny-qwen3"]
    with pytest.raises(ValueError, match="moe must be a MoeConfig exactly for"):
        dataclasses.replace(dense, moe=MoeConfig(4, 2, 8, True))
    with pytest.raises(ValueError, match="moe must be a MoeConfig exactly for"):
        dataclasses.replace(PRESETS["tiny-qwen3-moe"], moe=None)
    with pytest.raises(ValueError, match="mixtral's MoeConfig must have norm_topk_prob=True"):
        dataclasses.replace(PRESETS["tiny-mixtral"], moe=MoeConfig(8, 2, 512, False))


def test_dense_config_dict_has_no_moe_key():
    """A dense model's config data (fingerprint, random weights' recipe) is what it was
    before MoE support; a MoE model's names its experts."""
    assert "moe" not in PRESETS["tiny-qwen3"].to_dict()
    moe = PRESETS["qwen3-30b-a3b"].to_dict()["moe"]
    assert moe == dict(num_experts=128, num_experts_per_tok=8, moe_intermediate_size=768,
                       norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[])  # fmt: skip


def test_missing_expert_tensor(tiny_mixtral_dir, tmp_path):
    folder = Path(shutil.copytree(tiny_mixtral_dir, tmp_path / "m"))
    path = folder / "model.safetensors"
    tensors = load_file(str(path))
    del tensors["model.layers.1.block_sparse_moe.experts.3.w2.weight"]
    save_file(tensors, str(path))
    with pytest.raises(ModelLoadError, match="experts.3.w2.weight' is missing"):
        load_model(folder)


def test_bad_moe_config_json_names_the_file(tiny_qwen3_moe_dir, tmp_path):
    folder = Path(shutil.copytree(tiny_qwen3_moe_dir, tmp_path / "q"))
    raw = {**_raw(folder), "shared_expert_intermediate_size": 64}
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ModelLoadError) as info:
        load_model(folder)
    assert str(folder / "config.json") in str(info.value)
    assert "shared_expert_intermediate_size=64 is not supported" in str(info.value)


def test_the_prover_knows_the_float32_roles():
    """The kernel prover's copy of the float32-output roles (it imports no torch) is the op
    sets' (the router's logits are float32 in every op set)."""
    from samebits.analysis.kernel_prover import specs
    from samebits.kernels.interface import FLOAT32_ROLES

    assert specs.FLOAT32_ROLES == FLOAT32_ROLES
