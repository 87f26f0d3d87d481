"""Who runs where: the degree checks, the launch mode (samebits spawns the ranks, or joins a
`torchrun` env:// rendezvous) and the error a failed rank raises on rank 0."""

from __future__ import annotations

import os
from dataclasses import dataclass

SUPPORTED_DEGREES = (1, 2, 4, 8)  # every one divides the CPU split plan's 8 ranges


class TensorParallelError(RuntimeError):
    """A rank failed (exited, crashed, or timed out in a collective): the engine cannot go on."""


@dataclass(frozen=True)
class Topology:
    """This process's place: `rank` of `world_size`, the data backend, how ranks started."""

    rank: int
    world_size: int
    backend: str  # "gloo" (cpu) or "nccl" (cuda)
    launcher: str  # "spawn" (samebits started the ranks) or "torchrun" (env://)

    def to_dict(self) -> dict:
        """The fingerprint's topology entry (recorded, not hashed: the bits do not depend
        on it)."""
        return {"tensor_parallel_size": self.world_size, "backend": self.backend,
                "launcher": self.launcher}  # fmt: skip


def backend_for(device: str) -> str:
    """The collective backend of a device: NCCL on cuda, gloo on the CPU."""
    return "nccl" if device == "cuda" else "gloo"


def check_degree(degree: object) -> int:
    """ValueError unless `degree` is one of SUPPORTED_DEGREES (a positive int first)."""
    if not isinstance(degree, int) or isinstance(degree, bool) or degree < 1:
        raise ValueError(f"tensor_parallel_size must be a positive integer, got {degree!r}")
    if degree not in SUPPORTED_DEGREES:
        raise ValueError(
            f"tensor_parallel_size must be one of {SUPPORTED_DEGREES} (a divisor of the split "
            f"plan's 8 K ranges), got {degree}"
        )
    return degree


def torchrun_env(degree: int) -> tuple[int, int] | None:
    """(rank, world size) of a `torchrun` rendezvous (RANK / WORLD_SIZE set), else None;
    ValueError when its world size is not `degree`."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if world != degree:
        raise ValueError(
            f"tensor_parallel_size {degree} differs from torchrun's WORLD_SIZE {world}"
        )
    return rank, world
