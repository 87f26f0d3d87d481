"""The process group of a tensor-parallel deployment: a data group (NCCL on cuda, gloo on the
CPU) for the forward's all-gathers, and a gloo control group for rank 0's per-step messages.

Invariant: the data collectives are all-gathers only (each rank's tensor lands unchanged in
its rank's slot); no reduction collective is ever used, so the backend's algorithm choice
never touches a value. A collective that waits longer than STEP_TIMEOUT_S raises (a hung or
dead rank is an error, not a hang); the control group waits up to CONTROL_TIMEOUT_S for rank
0's next step (an idle engine is not an error).
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

import torch
import torch.distributed as dist

from samebits.parallel.topology import Topology

STEP_TIMEOUT_S = float(os.environ.get("SAMEBITS_TP_TIMEOUT", "300"))
CONTROL_TIMEOUT_S = 7 * 24 * 3600.0


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the spawned ranks' rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Group:
    """The two process groups of one deployment and the collectives the forward uses."""

    def __init__(self, topology: Topology, init_method: str) -> None:
        self.topology = topology
        self.rank, self.world_size = topology.rank, topology.world_size
        dist.init_process_group(
            topology.backend, init_method=init_method, rank=self.rank,
            world_size=self.world_size, timeout=timedelta(seconds=STEP_TIMEOUT_S),
        )  # fmt: skip
        self.control = dist.new_group(backend="gloo", timeout=timedelta(seconds=CONTROL_TIMEOUT_S))

    def broadcast(self, message: object = None) -> object:
        """Rank 0's `message` on every rank (pickled over the control group)."""
        box = [message if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]

    def gather_objects(self, value: object) -> list:
        """Every rank's `value`, in rank order, on every rank (control group)."""
        out: list = [None] * self.world_size
        dist.all_gather_object(out, value, group=self.control)
        return out

    def all_gather(self, t: torch.Tensor) -> torch.Tensor:
        """[world_size, *t.shape]: every rank's `t` in rank order, bits unchanged."""
        t = t.contiguous()
        out = torch.empty((self.world_size, *t.shape), dtype=t.dtype, device=t.device)
        if self.topology.backend == "nccl":
            dist.all_gather_into_tensor(out, t)
        else:
            dist.all_gather(list(out.unbind(0)), t)
        return out

    def destroy(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
