"""Tiny checkpoints whose o / down inputs (q size 256, intermediate 256) take the CPU split
plan's 8 ranges of 32 (`kernels/cpu/plan.linear_splits`), so they can be sharded."""

from __future__ import annotations

from pathlib import Path

import pytest

TP_DIMS = {"head_dim": 64, "intermediate_size": 256}


def tiny_tp(tmp_path_factory: pytest.TempPathFactory, arch: str) -> Path:
    from tiny_models import make_tiny_checkpoint

    return make_tiny_checkpoint(tmp_path_factory.mktemp(f"tiny_tp_{arch}"), arch, **TP_DIMS)


@pytest.fixture(scope="session")
def tiny_tp_llama_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_tp(tmp_path_factory, "llama")


@pytest.fixture(scope="session")
def make_tiny_tp(tmp_path_factory: pytest.TempPathFactory):
    """make(arch) -> the folder of that arch's shardable tiny checkpoint."""
    return lambda arch: tiny_tp(tmp_path_factory, arch)
