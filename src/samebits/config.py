"""`EngineConfig`: the one frozen description of an engine (vLLM's EngineArgs -> VllmConfig).

Four frozen parts, each validated in `__post_init__` (ValueError naming the field):

* `ModelConfig`    what fixes the logits bits: model, device, dtype, kernel plan, context
                   length (the deployment fingerprint records these);
* `CacheConfig`    the paged KV cache: block size, number of blocks (or the GPU memory share
                   that sizes it), prefix caching;
* `SchedulerConfig` per-step budgets: max_num_seqs, max_num_batched_tokens, max_model_len;
* `RuntimeConfig`  how steps run: native-kernel threads, CUDA graphs or eager.

Every default is defined once, here: the dataclass field defaults, and the per-device ones
(`DEVICE_DTYPES`, `SCHEDULER_DEFAULTS`) that `EngineConfig` fills in. `LLM`, `LLMEngine`, the
CLI and the server build one `EngineConfig` (from keyword arguments with `from_kwargs`, from
flags with `samebits.engine_args.config_from_args`) and pass it down; the engine keeps the
resolved config (`None` fields filled in from the built deployment) as `engine.config`.

No torch import at module level: the engine core (`engine/scheduler.py`) imports this module.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, TypeVar

T = TypeVar("T")

KERNEL_PLANS = ("invariant", "fast", "replay")
DEVICE_DTYPES = {"cpu": ("float32",), "cuda": ("bfloat16",)}  # first: the device's default
# plans with dtypes of their own: "replay" computes the GPU plan's bf16 bits on the CPU
PLAN_DTYPES = {("cpu", "replay"): ("bfloat16",)}


def plan_dtypes(device: str, kernel_plan: str) -> tuple[str, ...]:
    """The dtypes plan `kernel_plan` takes on `device` (the first: its default)."""
    return PLAN_DTYPES.get((device, kernel_plan), DEVICE_DTYPES[device])


# The scheduler budgets a device gets when none is given: (max_num_seqs,
# max_num_batched_tokens). The CPU's are sized for a laptop; the GPU's are vLLM's defaults
# (on an H200 they give 2.7x the throughput of the CPU's: measured, issue 25).
SCHEDULER_DEFAULTS: dict[str, tuple[int, int]] = {"cpu": (32, 512), "cuda": (256, 8192)}
SCHEDULER_BUDGETS = ("max_num_seqs", "max_num_batched_tokens")  # in SCHEDULER_DEFAULTS order
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9  # vLLM's name and default
DEFAULT_NUM_KV_BLOCKS = 512  # the CPU default (a GPU sizes its cache from free memory)


@dataclass(frozen=True)
class ModelConfig:
    """What fixes the bits. `model` None: the embedded default model; `dtype` None: the
    device's default (float32 on cpu, bfloat16 on cuda, filled in here); `max_model_len`
    None: the model's context length. Values only: whether the device exists on this
    machine is `check_device`'s job (the engine calls it before loading anything)."""

    model: str | None = None
    device: str = "cpu"
    dtype: str | None = None
    kernel_plan: str = "invariant"
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        if self.model is not None and not isinstance(self.model, str):
            object.__setattr__(self, "model", str(self.model))  # a Path is fine
        if self.kernel_plan not in KERNEL_PLANS:
            raise ValueError(f"kernel_plan must be one of {KERNEL_PLANS}, got {self.kernel_plan!r}")
        if self.device not in DEVICE_DTYPES:
            raise ValueError(f"device must be one of {tuple(DEVICE_DTYPES)}, got {self.device!r}")
        if self.kernel_plan == "replay" and self.device != "cpu":
            raise ValueError("kernel_plan 'replay' (the GPU plan's bits on a CPU) needs "
                             f"device 'cpu', got {self.device!r}")  # fmt: skip
        dtypes = plan_dtypes(self.device, self.kernel_plan)
        if self.dtype is None:
            object.__setattr__(self, "dtype", dtypes[0])
        if self.dtype not in dtypes:
            raise ValueError(f"dtype on {self.device} must be one of {dtypes}, got {self.dtype!r}")
        if self.max_model_len is not None:
            _require_positive("max_model_len", self.max_model_len)

    def check_device(self) -> None:
        """ValueError unless this machine has the device (a `cuda` config needs a GPU torch
        can see; torch is imported only then)."""
        if self.device == "cuda":
            _require_cuda()


@dataclass(frozen=True)
class CacheConfig:
    """Paged KV cache. `num_kv_blocks` None: DEFAULT_NUM_KV_BLOCKS on the CPU; on a GPU as
    many blocks as fit in `gpu_memory_utilization` of its memory after the weights (vLLM's
    meaning). Invariant: `block_size >= 1`; `num_kv_blocks` None or >= 1;
    `0 < gpu_memory_utilization <= 1`."""

    block_size: int = 16
    num_kv_blocks: int | None = None
    enable_prefix_caching: bool = True
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION

    def __post_init__(self) -> None:
        _require_positive("block_size", self.block_size)
        if self.num_kv_blocks is not None:
            _require_positive("num_kv_blocks", self.num_kv_blocks)
        _require_bool("enable_prefix_caching", self.enable_prefix_caching)
        _require_utilization(self.gpu_memory_utilization)


@dataclass(frozen=True)
class SchedulerConfig:
    """Per-step budgets. `max_num_seqs` / `max_num_batched_tokens` None: the device's default
    (`SCHEDULER_DEFAULTS`: 32 / 512 on cpu, 256 / 8192 on cuda), filled in by `EngineConfig`
    from its `model_config.device`. `max_model_len` None: filled in by the engine from the
    deployment (set the context length on `ModelConfig`). Invariant: every set value is >= 1."""

    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        for name in SCHEDULER_BUDGETS:
            if getattr(self, name) is not None:
                _require_positive(name, getattr(self, name))
        if self.max_model_len is not None:
            _require_positive("max_model_len", self.max_model_len)


@dataclass(frozen=True)
class RuntimeConfig:
    """How steps run. `num_threads` None: the plan's default thread count. `enforce_eager`
    (vLLM's name): on a GPU, run decode steps eagerly instead of replaying CUDA graphs (the
    same bits either way on the invariant plan; not part of the fingerprint).
    `async_scheduling` (vLLM's name): schedule and launch step n+1 before step n's outputs
    are built (its digests, logprobs, text), so that work runs while the device computes;
    None: on for cuda, off for cpu (where the forward runs on the host's own cores). It
    changes when a request added between steps joins, never a value (batch invariance).
    `lookahead` (used only with async scheduling): a step that only continues a plain-greedy
    step is launched before that step's tokens are known, fed from the device argmax.
    `device_digests`: where the runner can (a GPU), the SHA-256 of the rows of a step with no
    streamed output is computed on the device. Neither changes a value or a digest (the same
    strings either way), so neither is in the fingerprint; both may be switched between
    steps (`LLMEngine.update_runtime_config`), like `async_scheduling`.
    `tensor_parallel_size` (vLLM's name): processes (ranks) that each run a shard of the
    model (`samebits.parallel`); 1 (the default): none. The bits do not depend on it (the
    split plan), so it is topology, not part of the fingerprint; fixed when the engine is
    built."""

    num_threads: int | None = None
    enforce_eager: bool = False
    async_scheduling: bool | None = None
    lookahead: bool = True
    device_digests: bool = True
    tensor_parallel_size: int = 1

    def __post_init__(self) -> None:
        if self.num_threads is not None:
            _require_positive("num_threads", self.num_threads)
        _require_positive("tensor_parallel_size", self.tensor_parallel_size)
        _require_bool("enforce_eager", self.enforce_eager)
        if self.async_scheduling is not None:
            _require_bool("async_scheduling", self.async_scheduling)
        _require_bool("lookahead", self.lookahead)
        _require_bool("device_digests", self.device_digests)


# RuntimeConfig fields an engine may switch between steps (no value depends on them).
SWITCHABLE_RUNTIME = ("async_scheduling", "lookahead", "device_digests")


# The flat keyword names `LLM(**kwargs)`, `LLMEngine.from_args(**kwargs)` and the CLI use,
# and the part each belongs to.
_PARTS: dict[str, type] = {
    "model_config": ModelConfig,
    "cache_config": CacheConfig,
    "scheduler_config": SchedulerConfig,
    "runtime_config": RuntimeConfig,
}
KWARG_PARTS: dict[str, str] = {
    "model": "model_config",
    "device": "model_config",
    "dtype": "model_config",
    "kernel_plan": "model_config",
    "max_model_len": "model_config",
    "block_size": "cache_config",
    "num_kv_blocks": "cache_config",
    "enable_prefix_caching": "cache_config",
    "gpu_memory_utilization": "cache_config",
    "max_num_seqs": "scheduler_config",
    "max_num_batched_tokens": "scheduler_config",
    "num_threads": "runtime_config",
    "enforce_eager": "runtime_config",
    "async_scheduling": "runtime_config",
    "lookahead": "runtime_config",
    "device_digests": "runtime_config",
    "tensor_parallel_size": "runtime_config",
}
ENGINE_KWARGS = tuple(KWARG_PARTS)


@dataclass(frozen=True)
class EngineConfig:
    """The whole engine's settings, built once and passed down (`LLM` -> `LLMEngine` ->
    `Scheduler`, runner). Scheduler budgets left None take `model_config.device`'s defaults
    (`SCHEDULER_DEFAULTS`), filled in here; a value given is kept. Invariant: each part has
    its type and is valid; the scheduler budgets are set; a scheduler `max_model_len`, when
    set, is at most the model's (when that is set)."""

    model_config: ModelConfig = field(default_factory=ModelConfig)
    cache_config: CacheConfig = field(default_factory=CacheConfig)
    scheduler_config: SchedulerConfig = field(default_factory=SchedulerConfig)
    runtime_config: RuntimeConfig = field(default_factory=RuntimeConfig)

    def __post_init__(self) -> None:
        for name, part in _PARTS.items():
            value = getattr(self, name)
            if not isinstance(value, part):
                raise TypeError(f"{name} must be a {part.__name__}, got {type(value).__name__}")
        defaults = dict(
            zip(SCHEDULER_BUDGETS, SCHEDULER_DEFAULTS[self.model_config.device], strict=True)
        )
        unset = {k: v for k, v in defaults.items() if getattr(self.scheduler_config, k) is None}
        if unset:
            object.__setattr__(
                self, "scheduler_config", dataclasses.replace(self.scheduler_config, **unset)
            )
        cap, sched = self.model_config.max_model_len, self.scheduler_config.max_model_len
        if cap is not None and sched is not None and sched > cap:
            raise ValueError(
                f"scheduler_config.max_model_len ({sched}) exceeds model_config.max_model_len "
                f"({cap})"
            )

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> EngineConfig:
        """A config from today's flat keyword names (`ENGINE_KWARGS`); a name left out takes
        its default. TypeError naming any unknown keyword."""
        unknown = sorted(set(kwargs) - set(KWARG_PARTS))
        if unknown:
            raise TypeError(
                f"unexpected engine keyword argument(s) {', '.join(map(repr, unknown))}; "
                f"known: {', '.join(ENGINE_KWARGS)}"
            )
        parts: dict[str, dict[str, Any]] = {name: {} for name in _PARTS}
        for key, value in kwargs.items():
            if key == "gpu_memory_utilization" and value is None:
                continue  # None: the default (an older spelling)
            parts[KWARG_PARTS[key]][key] = value
        return cls(
            ModelConfig(**parts["model_config"]),
            CacheConfig(**parts["cache_config"]),
            SchedulerConfig(**parts["scheduler_config"]),
            RuntimeConfig(**parts["runtime_config"]),
        )

    @property
    def max_num_seqs(self) -> int:
        """The resolved `scheduler_config.max_num_seqs` (set by `__post_init__`)."""
        return resolved(self.scheduler_config.max_num_seqs, "max_num_seqs")

    @property
    def max_num_batched_tokens(self) -> int:
        """The resolved `scheduler_config.max_num_batched_tokens` (set by `__post_init__`)."""
        return resolved(self.scheduler_config.max_num_batched_tokens, "max_num_batched_tokens")

    def to_kwargs(self) -> dict[str, Any]:
        """The flat keyword arguments this config is built from (`from_kwargs` inverts it)."""
        return {key: getattr(getattr(self, part), key) for key, part in KWARG_PARTS.items()}

    def replace(self, **kwargs: Any) -> EngineConfig:
        """A copy with some flat keyword arguments changed (TypeError for unknown names).
        A new `device` takes the new device's defaults for the dtype and the scheduler budgets
        (`SCHEDULER_DEFAULTS`) not given in `kwargs` whose old value was the old device's
        default (a value tuned away from it is kept)."""
        current = self.to_kwargs()
        mc = self.model_config
        if "device" in kwargs:
            old: dict[str, object] = {"dtype": plan_dtypes(mc.device, mc.kernel_plan)[0]}
            old.update(zip(SCHEDULER_BUDGETS, SCHEDULER_DEFAULTS[mc.device], strict=True))
            for key, default in old.items():
                if key not in kwargs and current[key] == default:
                    current[key] = None
        return EngineConfig.from_kwargs(**{**current, **kwargs})


def build_config(config: EngineConfig | None = None, **kwargs: Any) -> EngineConfig:
    """`config` (default: all defaults) with the given flat keyword arguments applied."""
    if config is not None and not isinstance(config, EngineConfig):
        raise TypeError(f"config must be an EngineConfig, got {type(config).__name__}")
    base = config or EngineConfig()
    return base.replace(**kwargs) if kwargs else base


def resolved_parts(config: EngineConfig, **changes: Any) -> EngineConfig:
    """`dataclasses.replace` on the nested parts: `changes` maps a flat keyword name to its
    resolved value (validation runs again)."""
    parts: dict[str, dict[str, Any]] = {name: {} for name in _PARTS}
    for key, value in changes.items():
        parts[KWARG_PARTS[key]][key] = value
    return dataclasses.replace(
        config,
        **{name: dataclasses.replace(getattr(config, name), **kw) for name, kw in parts.items()},
    )


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
    _require_utilization(utilization)
    budget = total_bytes * utilization - (total_bytes - free_bytes)
    blocks = int(budget // bytes_per_block)
    if blocks < 1:
        raise ValueError(
            f"no KV-cache block fits: {(total_bytes - free_bytes) / 2**30:.1f} GiB of "
            f"{total_bytes / 2**30:.1f} GiB already in use with gpu_memory_utilization="
            f"{utilization}; raise it or pass num_kv_blocks"
        )
    return blocks


def resolved(value: T | None, name: str) -> T:
    """`value`, which the config has resolved (a None left where `EngineConfig` or the
    engine's assembly fills it in): AssertionError naming the field otherwise."""
    if value is None:
        raise AssertionError(f"the engine config's {name} is unresolved")
    return value


def _require_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _require_bool(name: str, value: bool) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def _require_utilization(value: float) -> None:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not 0.0 < value <= 1.0:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {value!r}")
