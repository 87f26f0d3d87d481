"""Command-line flags of the engine options, shared by `samebits generate / info / serve /
verify` (vLLM's EngineArgs role): `add_engine_arguments(parser)` adds them, with the
defaults of `samebits.config` (defined there only), and `config_from_args(args)` turns the
parsed flags into the one `EngineConfig` the command passes down. A flag whose default
depends on the device (`--dtype`, `--max-num-seqs`, `--max-num-batched-tokens`, ...)
defaults to None: the config fills it in for the chosen `--device`.

Flag names are the keyword names with dashes (`--max-num-seqs` -> `max_num_seqs`), except
`--no-prefix-caching` (stores `enable_prefix_caching=False`) and `--threads`, a deprecated
alias of `--num-threads`.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from samebits.config import (
    DEFAULT_NUM_KV_BLOCKS,
    DEVICE_DTYPES,
    ENGINE_KWARGS,
    KERNEL_PLANS,
    SCHEDULER_DEFAULTS,
    CacheConfig,
    EngineConfig,
    ModelConfig,
    RuntimeConfig,
)

DEPLOYMENT_OPTIONS = (
    "--model", "--kernel-plan", "--device", "--dtype", "--num-threads", "--max-model-len",
    "--tensor-parallel-size",
)  # fmt: skip
DEPRECATED_ALIASES = {"--threads": "--num-threads"}


def _default(part: type, name: str) -> Any:
    """The config's default of `name` (the one place defaults are defined)."""
    return next(f.default for f in dataclasses.fields(part) if f.name == name)


class _DeprecatedAlias(argparse.Action):
    """Stores like the option it is an alias of, and says so on stderr when the old
    spelling is used."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        new = DEPRECATED_ALIASES.get(option_string or "")
        if new is not None:
            print(
                f"{parser.prog}: warning: {option_string} is deprecated, use {new}",
                file=sys.stderr,
            )
        setattr(namespace, self.dest, values)


def add_deployment_arguments(p: argparse.ArgumentParser, inherit: bool = False) -> None:
    """The options that choose the deployment (what fixes the bits, plus threads), with one
    name per option for every command.

    `inherit=True` (verify): every default is None, so the values recorded in the audit log
    are used unless the command line overrides them.
    """
    model_help = (
        "model to replay with (default: the one in the log)"
        if inherit
        else "HF folder or .gguf file (default: embedded SmolLM2)"
    )
    p.add_argument("--model", default=None, help=model_help)
    p.add_argument(
        "--kernel-plan", choices=KERNEL_PLANS,
        default=None if inherit else _default(ModelConfig, "kernel_plan"),
    )  # fmt: skip
    p.add_argument(
        "--device", choices=tuple(DEVICE_DTYPES),
        default=None if inherit else _default(ModelConfig, "device"),
    )  # fmt: skip
    p.add_argument("--dtype", default=None, help="float32 on cpu, bfloat16 on cuda (the default)")
    p.add_argument(
        "--num-threads", "--threads", dest="num_threads", type=int, default=None,
        action=_DeprecatedAlias, metavar="N",
        help="threads of the native kernels (--threads: deprecated alias)",
    )  # fmt: skip
    p.add_argument(
        "--max-model-len", type=int, default=None, metavar="N",
        help="context length (default: the model's)",
    )  # fmt: skip
    p.add_argument(
        "--tensor-parallel-size", "-tp", type=int, default=None, metavar="N",
        help="ranks that each run a shard of the model (1, 2, 4 or 8; default 1; the same "
        "bits at every size)",
    )  # fmt: skip


def add_step_arguments(p: argparse.ArgumentParser) -> None:
    """The runtime flags of how steps run (CUDA graphs, async scheduling, lookahead, digests)."""
    p.add_argument(
        "--enforce-eager", action="store_true", default=_default(RuntimeConfig, "enforce_eager"),
        help="cuda: run every step eagerly (default: decode steps replay CUDA graphs)",
    )  # fmt: skip
    for flag, help_text in _SWITCH_HELP.items():
        name = flag[2:].replace("-", "_")
        default = None if name == "async_scheduling" else _default(RuntimeConfig, name)
        p.add_argument(flag, action=argparse.BooleanOptionalAction, default=default,
                       help=help_text)  # fmt: skip


# The on/off runtime switches (RuntimeConfig fields; none changes a value).
_SWITCH_HELP = {
    "--async-scheduling": "launch step n+1 before building step n's outputs (default: on for "
    "cuda, off for cpu; the same bits either way)",
    "--lookahead": "with async scheduling, launch a plain-greedy step's successor before its "
    "tokens are known (default: on; the same bits either way)",
    "--device-digests": "cuda: hash the logits rows on the device (default: on; the same "
    "digests either way)",
}


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """Every engine option: the deployment's, the KV cache's, the scheduler's, the runtime's."""
    add_deployment_arguments(p)
    add = p.add_argument
    cpu, gpu = SCHEDULER_DEFAULTS["cpu"], SCHEDULER_DEFAULTS["cuda"]
    add("--max-num-seqs", type=int, default=None, metavar="N",
        help=f"most requests in one step (default: {cpu[0]} on cpu, {gpu[0]} on cuda)")  # fmt: skip
    add("--max-num-batched-tokens", type=int, default=None, metavar="N",
        help="token budget of one step; prompts are chunked to fit (default: "
        f"{cpu[1]} on cpu, {gpu[1]} on cuda)")  # fmt: skip
    add("--block-size", type=int, default=_default(CacheConfig, "block_size"), metavar="N",
        help="tokens per KV-cache block")  # fmt: skip
    add("--num-kv-blocks", type=int, default=None, metavar="N",
        help=f"KV-cache blocks (default: {DEFAULT_NUM_KV_BLOCKS} on cpu; on cuda what "
        "--gpu-memory-utilization fits)")  # fmt: skip
    add("--gpu-memory-utilization", type=float, metavar="F",
        default=_default(CacheConfig, "gpu_memory_utilization"),
        help="share of the GPU's memory the engine may use in all (cuda only)")  # fmt: skip
    add("--no-prefix-caching", dest="enable_prefix_caching", action="store_false",
        default=_default(CacheConfig, "enable_prefix_caching"),
        help="turn off the prefix cache")  # fmt: skip
    add_step_arguments(p)


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """The flat engine keyword arguments present on `args` (None values left out, so they
    take the config's defaults)."""
    return {k: getattr(args, k) for k in ENGINE_KWARGS if getattr(args, k, None) is not None}


def config_from_args(args: argparse.Namespace) -> EngineConfig:
    """The one EngineConfig of a command (ValueError for a bad value)."""
    return EngineConfig.from_kwargs(**engine_kwargs(args))
