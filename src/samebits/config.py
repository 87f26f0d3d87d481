"""Frozen configuration of an engine deployment (cache, scheduler, kernel plan)."""

from __future__ import annotations

from dataclasses import dataclass

KERNEL_PLANS = ("invariant", "fast")
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's name and default
DEFAULT_NUM_KV_BLOCKS = 512  # the CPU default (a GPU sizes its cache from free memory)
DEVICE_DTYPES = {"cpu": ("float32",), "cuda": ("bfloat16",)}  # first: the device's default


@dataclass(frozen=True)
class CacheConfig:
    """Paged KV cache shape. Invariant: `block_size >= 1`, `num_kv_blocks >= 1`."""

    block_size: int = 16
    num_kv_blocks: int = DEFAULT_NUM_KV_BLOCKS
    enable_prefix_caching: bool = True

    def __post_init__(self) -> None:
        _require_positive("block_size", self.block_size)
        _require_positive("num_kv_blocks", self.num_kv_blocks)


@dataclass(frozen=True)
class SchedulerConfig:
    """Per-step budgets. Invariant: both budgets are at least 1."""

    max_num_seqs: int = 32
    max_num_batched_tokens: int = 512
    max_model_len: int = 2048

    def __post_init__(self) -> None:
        _require_positive("max_num_seqs", self.max_num_seqs)
        _require_positive("max_num_batched_tokens", self.max_num_batched_tokens)
        _require_positive("max_model_len", self.max_model_len)


@dataclass(frozen=True)
class PlanConfig:
    """Static facts the kernel plan is chosen from (never runtime state)."""

    kernel_plan: str = "invariant"
    dtype: str | None = None  # None: the device's default (float32 on cpu, bfloat16 on cuda)
    device: str = "cpu"
    num_threads: int | None = None

    def __post_init__(self) -> None:
        if self.kernel_plan not in KERNEL_PLANS:
            raise ValueError(f"kernel_plan must be one of {KERNEL_PLANS}, got {self.kernel_plan!r}")
        if self.device not in DEVICE_DTYPES:
            raise ValueError(f"device must be one of {tuple(DEVICE_DTYPES)}, got {self.device!r}")
        dtypes = DEVICE_DTYPES[self.device]
        if self.dtype is None:
            object.__setattr__(self, "dtype", dtypes[0])
        if self.dtype not in dtypes:
            raise ValueError(f"dtype on {self.device} must be one of {dtypes}, got {self.dtype!r}")
        if self.device == "cuda":
            _require_cuda()
        if self.num_threads is not None:
            _require_positive("num_threads", self.num_threads)


def _require_cuda() -> None:
    import torch

    if not torch.cuda.is_available():
        raise ValueError("device 'cuda' was asked for, but torch sees no CUDA GPU on this machine")


def kv_blocks_for_memory(
    total_bytes: int, free_bytes: int, utilization: float, bytes_per_block: int
) -> int:
    """KV-cache blocks that fit when this process may use `utilization` of the device's
    memory in all (vLLM's `gpu_memory_utilization`): what is already in use (weights, other
    processes) comes off that share first. ValueError when not one block fits."""
    if not 0.0 < utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {utilization!r}")
    budget = total_bytes * utilization - (total_bytes - free_bytes)
    blocks = int(budget // bytes_per_block)
    if blocks < 1:
        raise ValueError(
            f"no KV-cache block fits: {(total_bytes - free_bytes) / 2**30:.1f} GiB of "
            f"{total_bytes / 2**30:.1f} GiB already in use with gpu_memory_utilization="
            f"{utilization}; raise it or pass num_kv_blocks"
        )
    return blocks


def _require_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
