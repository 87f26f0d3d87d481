"""The sharded linears of one rank and the op set that makes them.

Every wrapper reports the full (unsharded) weight shape, so the deployment's qualification
keys, and with them its fingerprint, are those of TP = 1; `qualify` probes the rank's own
kernel (row invariance; the collectives and the ordered sum are row-local).

Row-parallel (o, down): the rank's kernel yields its S/t range partials [S/t, M, N] float32,
all-gathered into [t, S/t, M, N] = the S partials in range order, summed ((c_0 + c_1) + c_2)
+ ... in float32 (the order sbgemm.c's split and the GPU plan use), then cast to the
activation dtype: the TP = 1 bits.
"""

from __future__ import annotations

import torch

from samebits.kernels.cpu.linear import qualify as qualify_rows
from samebits.parallel.comm import Group


def row_splits(plan, n: int, k: int, role: str) -> int:
    """The split plan's K ranges of a full weight [n, k] with `role` on `plan`'s device."""
    if plan.device == "cpu":
        from samebits.kernels.cpu.plan import linear_splits

        return linear_splits(k, role)
    from samebits.kernels.triton.splitplan import split_plan

    return split_plan(n, k, role).splits


def ordered_sum(parts: torch.Tensor) -> torch.Tensor:
    """((p_0 + p_1) + p_2) + ...: float32 adds in index order over dim 0."""
    total = parts[0]
    for s in range(1, parts.shape[0]):
        total = total + parts[s]
    return total


class _Sharded:
    """Shape (full) and probe shared by the wrappers."""

    full_shape: tuple[int, int]
    local: object

    @property
    def shape(self) -> tuple[int, int]:
        return self.full_shape

    def qualify(self) -> bool:
        probe = getattr(self.local, "qualify", None)
        return probe() if probe is not None else qualify_rows(self.local)


class ColumnParallelLinear(_Sharded):
    """The rank's output columns: its kernel alone (no collective; the next op is local)."""

    def __init__(self, local, full_shape: tuple[int, int]) -> None:
        self.local, self.full_shape = local, full_shape

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.local(x)


class RangePartials:
    """A rank's partials through one linear per owned K range (the GPU plan's kernels: each a
    one-chain float32-output linear over its range). shape: the rank's [N, K / t]."""

    def __init__(self, linears: list, range_k: int, shape: tuple[int, int]) -> None:
        self.linears, self.range_k, self.shape = linears, range_k, shape

    def partials(self, x: torch.Tensor) -> torch.Tensor:
        k = self.range_k
        return torch.stack(
            [lin(x[:, i * k : (i + 1) * k].contiguous()) for i, lin in enumerate(self.linears)]
        )

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return ordered_sum(self.partials(x))

    def qualify(self) -> bool:
        probes = [getattr(lin, "qualify", None) for lin in self.linears]
        return all(
            p() if p is not None else qualify_rows(lin)
            for p, lin in zip(probes, self.linears, strict=True)
        )


class RowParallelLinear(_Sharded):
    """y = sum over all S ranges in order of the gathered partials (+ bias), act dtype."""

    def __init__(self, local, group: Group, full_shape: tuple[int, int], bias, out_dtype) -> None:
        self.local, self.group, self.full_shape = local, group, full_shape
        self.bias, self.out_dtype = bias, out_dtype

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        parts = self.local.partials(x).float()
        gathered = self.group.all_gather(parts)  # [t, S/t, M, N]
        y = ordered_sum(gathered.reshape(-1, *parts.shape[1:]))
        if self.bias is not None:
            y = y + self.bias
        return y.to(self.out_dtype)


class VocabParallelLinear(_Sharded):
    """The LM head: the rank's vocabulary block, all-gathered and laid side by side in rank
    order, cut at the vocabulary size (float32 logits)."""

    def __init__(self, local, group: Group, full_shape: tuple[int, int]) -> None:
        self.local, self.group, self.full_shape = local, group, full_shape

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        block = self.local(x)  # [M, V_l]
        gathered = self.group.all_gather(block)  # [t, M, V_l]
        rows = gathered.permute(1, 0, 2).reshape(block.shape[0], gathered.shape[0] * block.shape[1])
        return rows[:, : self.full_shape[0]].contiguous()


class TensorParallelOps:
    """A rank's op set: the plan's own (every op it does not override), whose `linear` makes
    the sharded wrappers above from the rank's weight blocks (`shard.shard_weights`)."""

    def __init__(self, base, plan, group: Group, vocab_size: int) -> None:
        self.base, self.plan, self.group, self.vocab_size = base, plan, group, vocab_size

    def __getattr__(self, name: str):
        if name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)

    def linear(self, weight, bias, source=None, role: str = ""):
        """`weight`: this rank's block; `source`: its stored form (`shard.shard_stored`), read
        by the CPU kernel where it can (the same bits as the float32 block)."""
        t = self.group.world_size
        n, k = weight.shape
        if role in ("o", "down"):
            b = None if bias is None else self.base.weight(bias).float()
            local = self._partials(weight, role, n, k * t, source)
            return RowParallelLinear(local, self.group, (n, k * t), b, self.base.act_dtype)
        if role == "lm_head":
            local = self.base.linear(weight, None, source, role=role)
            return VocabParallelLinear(local, self.group, (self.vocab_size, k))
        if role not in ("qkv", "gate_up"):
            raise ValueError(f"tensor parallelism has no sharding for linear role {role!r}")
        return ColumnParallelLinear(self.base.linear(weight, bias, source, role=role), (n * t, k))

    def _partials(self, weight, role: str, n: int, k: int, source=None):
        """The rank's kernel for its S/t ranges of a row-parallel weight [n, k] (full k)."""
        t = self.group.world_size
        splits = row_splits(self.plan, n, k, role)
        if splits % t:
            raise ValueError(
                f"the split plan of {role} [{n} x {k}] has {splits} K ranges; "
                f"tensor_parallel_size {t} does not divide it"
            )
        if self.plan.device == "cpu":
            from samebits.kernels.cpu.sbgemm import SbLinear

            return SbLinear(weight, None, self.base.num_threads, source, splits // t)
        kr = k // splits
        blocks = [weight[:, i * kr : (i + 1) * kr] for i in range(splits // t)]
        linears = [self.base.linear(b.contiguous(), None, None, role="lm_head") for b in blocks]
        return RangePartials(linears, kr, (n, k // t))
