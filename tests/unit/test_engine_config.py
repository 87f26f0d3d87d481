"""`EngineConfig` (issue 10.4): one frozen config, defaults defined once, clear errors, the
same config from `LLM(**kwargs)`, `EngineConfig(...)` and the command line."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from samebits.cli import build_parser
from samebits.config import (
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_NUM_KV_BLOCKS,
    ENGINE_KWARGS,
    SCHEDULER_DEFAULTS,
    CacheConfig,
    EngineConfig,
    ModelConfig,
    RuntimeConfig,
    SchedulerConfig,
)
from samebits.engine_args import config_from_args

CUSTOM = dict(
    model="m.gguf", kernel_plan="fast", device="cpu", dtype="float32", max_model_len=77,
    block_size=4, num_kv_blocks=64, enable_prefix_caching=False, gpu_memory_utilization=0.5,
    max_num_seqs=3, max_num_batched_tokens=40, num_threads=2, enforce_eager=True,
    async_scheduling=True, lookahead=False, device_digests=False, tensor_parallel_size=2,
)  # fmt: skip
FLAGS = [
    "--model", "m.gguf", "--kernel-plan", "fast", "--device", "cpu", "--dtype", "float32",
    "--max-model-len", "77", "--block-size", "4", "--num-kv-blocks", "64",
    "--no-prefix-caching", "--gpu-memory-utilization", "0.5", "--max-num-seqs", "3",
    "--max-num-batched-tokens", "40", "--num-threads", "2", "--enforce-eager",
    "--async-scheduling", "--no-lookahead", "--no-device-digests", "--tensor-parallel-size", "2",
]  # fmt: skip


def test_defaults():
    cfg = EngineConfig()
    assert cfg.model_config == ModelConfig(None, "cpu", "float32", "invariant", None)
    assert cfg.cache_config == CacheConfig(16, None, True, DEFAULT_GPU_MEMORY_UTILIZATION)
    assert cfg.scheduler_config == SchedulerConfig(32, 512, None)  # the cpu's budgets
    assert SchedulerConfig() == SchedulerConfig(None, None, None)  # filled in by EngineConfig
    assert cfg.runtime_config == RuntimeConfig(None, False)
    assert DEFAULT_NUM_KV_BLOCKS == 512  # the CPU cache size when num_kv_blocks is None
    assert EngineConfig.from_kwargs() == cfg
    assert set(cfg.to_kwargs()) == set(ENGINE_KWARGS)


def test_frozen():
    cfg = EngineConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.cache_config.block_size = 8  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.model_config = ModelConfig()  # type: ignore[misc]


def test_defaults_are_defined_once():
    """The API signatures carry no engine defaults of their own: they take **kwargs and
    build the config, so a default lives only in the dataclass fields."""
    from samebits.engine.engine import LLMEngine
    from samebits.llm import LLM

    for func in (
        LLM.__init__,
        LLMEngine.from_args,
        LLMEngine.from_loaded,
        LLMEngine.from_deployment,
    ):
        assert not set(inspect.signature(func).parameters) & (set(ENGINE_KWARGS) - {"model"})
    parser = build_parser()
    args = parser.parse_args(["serve"])
    assert config_from_args(args) == EngineConfig()
    args = parser.parse_args(["generate", "hi"])
    assert config_from_args(args) == EngineConfig()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"block_size": 0}, "block_size must be a positive integer, got 0"),
        ({"num_kv_blocks": -1}, "num_kv_blocks must be a positive integer"),
        ({"max_num_seqs": 1.5}, "max_num_seqs must be a positive integer"),
        ({"max_num_batched_tokens": True}, "max_num_batched_tokens must be a positive"),
        ({"max_model_len": 0}, "max_model_len must be a positive integer"),
        ({"num_threads": 0}, "num_threads must be a positive integer"),
        ({"gpu_memory_utilization": 0.0}, r"gpu_memory_utilization must be in \(0, 1\]"),
        ({"gpu_memory_utilization": 1.5}, r"gpu_memory_utilization must be in \(0, 1\]"),
        ({"kernel_plan": "quick"}, "kernel_plan must be one of"),
        ({"device": "tpu"}, "device must be one of"),
        ({"dtype": "bfloat16"}, "dtype on cpu must be one of"),
        ({"enable_prefix_caching": "yes"}, "enable_prefix_caching must be True or False"),
        ({"enforce_eager": 1}, "enforce_eager must be True or False"),
    ],
)
def test_validation_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        EngineConfig.from_kwargs(**kwargs)


def test_parts_are_type_checked_and_consistent():
    with pytest.raises(TypeError, match="cache_config must be a CacheConfig"):
        EngineConfig(cache_config=SchedulerConfig())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="exceeds model_config.max_model_len"):
        EngineConfig(ModelConfig(max_model_len=8), scheduler_config=SchedulerConfig(2, 8, 9))


def test_unknown_keyword_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="'max_num_seq'"):
        EngineConfig.from_kwargs(max_num_seq=4)
    from samebits.llm import LLM

    with pytest.raises(TypeError, match="'num_gpu_blocks'"):
        LLM(num_gpu_blocks=4)  # refused before anything is loaded
    with pytest.raises(TypeError, match="config must be an EngineConfig"):
        LLM(config={"block_size": 4})


def test_kwargs_round_trip():
    cfg = EngineConfig.from_kwargs(**CUSTOM)
    assert cfg.to_kwargs() == CUSTOM
    assert EngineConfig.from_kwargs(**cfg.to_kwargs()) == cfg
    assert cfg.cache_config == CacheConfig(4, 64, False, 0.5)
    assert cfg.scheduler_config == SchedulerConfig(3, 40, None)
    assert cfg.runtime_config == RuntimeConfig(2, True, True, False, False, 2)
    assert cfg.replace(block_size=8).cache_config.block_size == 8
    assert cfg.replace(block_size=8).replace(block_size=4) == cfg


def test_cli_flags_round_trip():
    for command in (["generate", "hi"], ["serve"]):
        args = build_parser().parse_args(command + FLAGS)
        assert config_from_args(args) == EngineConfig.from_kwargs(**CUSTOM), command


def test_cli_bad_value_is_a_value_error():
    args = build_parser().parse_args(["serve", "--block-size", "0"])
    with pytest.raises(ValueError, match="block_size"):
        config_from_args(args)


def test_device_change_takes_its_default_dtype(monkeypatch):
    cfg = EngineConfig.from_kwargs(device="cuda")  # values only: no GPU needed to describe one
    assert cfg.model_config.dtype == "bfloat16"
    assert EngineConfig().replace(device="cuda").model_config.dtype == "bfloat16"


def test_scheduler_budgets_default_by_device():
    """Issue 25: a GPU that is not tuned gets vLLM's budgets (256 / 8192), the CPU keeps
    32 / 512; a value given is kept on either device."""
    assert SCHEDULER_DEFAULTS == {"cpu": (32, 512), "cuda": (256, 8192)}
    cuda = EngineConfig.from_kwargs(device="cuda")  # values only: no GPU needed
    assert cuda.scheduler_config == SchedulerConfig(256, 8192, None)
    assert (cuda.max_num_seqs, cuda.max_num_batched_tokens) == (256, 8192)
    assert EngineConfig(ModelConfig(device="cuda")).scheduler_config == cuda.scheduler_config
    cpu = EngineConfig.from_kwargs(device="cpu")
    assert (cpu.max_num_seqs, cpu.max_num_batched_tokens) == (32, 512)
    for device in ("cpu", "cuda"):
        cfg = EngineConfig.from_kwargs(device=device, max_num_seqs=7, max_num_batched_tokens=99)
        assert cfg.scheduler_config == SchedulerConfig(7, 99, None), device
        one = EngineConfig.from_kwargs(device=device, max_num_seqs=5)
        assert one.max_num_seqs == 5
        assert one.max_num_batched_tokens == SCHEDULER_DEFAULTS[device][1]
    # a device's default given explicitly is kept on the other device
    assert EngineConfig.from_kwargs(device="cuda", max_num_seqs=32).max_num_seqs == 32
    assert EngineConfig.from_kwargs(max_num_batched_tokens=8192).max_num_batched_tokens == 8192


def test_device_change_takes_its_default_budgets():
    moved = EngineConfig().replace(device="cuda")
    assert moved.scheduler_config == SchedulerConfig(256, 8192, None)
    assert moved == EngineConfig.from_kwargs(device="cuda")
    assert moved.replace(device="cpu") == EngineConfig()
    tuned = EngineConfig.from_kwargs(max_num_seqs=3, max_num_batched_tokens=40)
    assert tuned.replace(device="cuda").scheduler_config == SchedulerConfig(3, 40, None)
    half = EngineConfig.from_kwargs(max_num_seqs=3).replace(device="cuda")
    assert (half.max_num_seqs, half.max_num_batched_tokens) == (3, 8192)
    given = EngineConfig().replace(device="cuda", max_num_seqs=32)
    assert (given.max_num_seqs, given.max_num_batched_tokens) == (32, 8192)
    # no device change: nothing moves
    assert (
        EngineConfig.from_kwargs(device="cuda", max_num_seqs=8).replace(block_size=4).max_num_seqs
        == 8
    )


def test_cli_scheduler_flags_default_by_device():
    parser = build_parser()
    for command in (["generate", "hi"], ["serve"]):
        args = parser.parse_args(command + ["--device", "cuda"])
        assert (args.max_num_seqs, args.max_num_batched_tokens) == (None, None)
        cfg = config_from_args(args)
        assert cfg.scheduler_config == SchedulerConfig(256, 8192, None), command
        cpu = config_from_args(parser.parse_args(command))
        assert cpu.scheduler_config == SchedulerConfig(32, 512, None), command
        flags = ["--device", "cuda", "--max-num-seqs", "32", "--max-num-batched-tokens", "512"]
        kept = config_from_args(parser.parse_args(command + flags))
        assert kept.scheduler_config == SchedulerConfig(32, 512, None), command
        flags = ["--max-num-seqs", "256", "--max-num-batched-tokens", "8192"]
        kept = config_from_args(parser.parse_args(command + flags))
        assert kept.scheduler_config == SchedulerConfig(256, 8192, None), command
    serve = parser._subparsers._group_actions[0].choices["serve"]  # type: ignore[union-attr]
    help_text = " ".join(serve.format_help().split())
    assert "(default: 32 on cpu, 256 on cuda)" in help_text
    assert "(default: 512 on cpu, 8192 on cuda)" in help_text


def test_scheduler_refuses_unresolved_budgets():
    from samebits.engine.scheduler import Scheduler

    cache = CacheConfig(4, 8)
    with pytest.raises(ValueError, match="max_num_seqs and max_num_batched_tokens set"):
        Scheduler.from_configs(cache, SchedulerConfig(max_model_len=16))
    with pytest.raises(ValueError, match="max_num_seqs and max_num_batched_tokens set"):
        Scheduler.from_configs(cache, SchedulerConfig(4, None, 16))
    assert Scheduler.from_configs(cache, SchedulerConfig(4, 8, 16)).max_num_seqs == 4


def test_from_deployment_takes_the_deployment_devices_budgets(tiny_llama_dir, monkeypatch):
    """A cuda deployment with no budgets given resolves to the GPU's, and sizes the KV cache
    with them; budgets given are kept (the plan is only relabelled: nothing runs)."""
    from samebits.deployment import build_deployment
    from samebits.engine import runner
    from samebits.engine.assembly import KV_BLOCKS_PER_SEQUENCE_SLOT
    from samebits.engine.engine import LLMEngine
    from samebits.model import load_model

    dep = build_deployment(load_model(str(tiny_llama_dir)), "invariant", 1)
    gpu_like = dataclasses.replace(
        dep, plan=dataclasses.replace(dep.plan, device="cuda", dtype="bfloat16")
    )
    monkeypatch.setattr(runner, "kv_blocks_for_device", lambda *a: 10**7)
    per_sequence = -(-dep.max_model_len // 16)
    engine = LLMEngine.from_deployment(gpu_like)
    assert engine.config.model_config.device == "cuda"
    assert (engine.config.max_num_seqs, engine.config.max_num_batched_tokens) == (256, 8192)
    assert (engine.scheduler.max_num_seqs, engine.scheduler.max_num_batched_tokens) == (256, 8192)
    assert engine.scheduler.num_kv_blocks == KV_BLOCKS_PER_SEQUENCE_SLOT * 256 * per_sequence
    kept = LLMEngine.from_deployment(gpu_like, max_num_seqs=32, max_num_batched_tokens=512)
    assert (kept.scheduler.max_num_seqs, kept.scheduler.max_num_batched_tokens) == (32, 512)
    assert kept.scheduler.num_kv_blocks == KV_BLOCKS_PER_SEQUENCE_SLOT * 32 * per_sequence
    cpu = LLMEngine.from_deployment(dep)
    assert (cpu.scheduler.max_num_seqs, cpu.scheduler.max_num_batched_tokens) == (32, 512)


def test_llm_kwargs_and_config_give_the_same_engine_config(tiny_llama_dir):
    from samebits.engine.engine import LLMEngine
    from samebits.llm import LLM

    kwargs = dict(block_size=4, num_kv_blocks=64, max_num_seqs=3, max_num_batched_tokens=24)
    by_kwargs = LLM(str(tiny_llama_dir), **kwargs)
    config = EngineConfig.from_kwargs(model=str(tiny_llama_dir), **kwargs)
    by_config = LLM(config=config)
    got = by_kwargs.engine.config
    assert got == by_config.engine.config
    # resolved: the deployment's context length and threads filled in, the rest as asked
    assert got.scheduler_config.max_model_len == by_kwargs.engine.max_model_len
    assert got.model_config.max_model_len == by_kwargs.engine.max_model_len
    assert got.runtime_config.num_threads == by_kwargs.engine.deployment.plan.num_threads
    assert got.cache_config == CacheConfig(4, 64, True, DEFAULT_GPU_MEMORY_UTILIZATION)
    # the Scheduler got its parts
    sched = by_kwargs.engine.scheduler
    assert sched.cache_config.num_kv_blocks == 64 and sched.cache_config.block_size == 4
    assert sched.scheduler_config == got.scheduler_config
    # a config plus keyword overrides
    over = LLMEngine.from_deployment(by_config.engine.deployment, config=config, block_size=8)
    assert over.config.cache_config.block_size == 8
    assert over.scheduler.block_size == 8
    # the CPU default cache size is DEFAULT_NUM_KV_BLOCKS
    plain = LLMEngine.from_deployment(by_config.engine.deployment)
    assert plain.config.cache_config.num_kv_blocks == DEFAULT_NUM_KV_BLOCKS
    assert plain.scheduler.num_kv_blocks == DEFAULT_NUM_KV_BLOCKS
    with pytest.raises(TypeError, match="'kernel_plan'"):
        LLMEngine.from_deployment(by_config.engine.deployment, kernel_plan="fast")


def test_fingerprint_does_not_depend_on_scheduler_or_cache_sizes(tiny_llama_dir):
    from samebits.engine.engine import LLMEngine
    from samebits.model import load_model

    loaded = load_model(str(tiny_llama_dir))
    a = LLMEngine.from_loaded(loaded, max_num_seqs=2, num_kv_blocks=32, block_size=4)
    b = LLMEngine.from_loaded(loaded, max_num_seqs=8, enable_prefix_caching=False)
    assert a.fingerprint == b.fingerprint


def test_a_resolved_config_rebuilds_the_same_engine(tiny_llama_dir):
    from samebits.engine.engine import LLMEngine
    from samebits.llm import LLM

    llm = LLM(str(tiny_llama_dir), block_size=4, num_kv_blocks=32, max_model_len=64)
    dep, cfg = llm.engine.deployment, llm.engine.config
    assert cfg.model_config.max_model_len == cfg.scheduler_config.max_model_len == 64
    assert LLMEngine.from_deployment(dep, config=cfg).config == cfg
    wrong = dataclasses.replace(cfg.scheduler_config, max_model_len=32)
    with pytest.raises(ValueError, match="set model_config.max_model_len instead"):
        LLMEngine.from_deployment(dep, config=dataclasses.replace(cfg, scheduler_config=wrong))


def test_a_plan_without_cpu_threads_resolves_to_none(tiny_llama_dir):
    """GPU plans carry num_threads=0 (no CPU kernel threads): the engine builds (found on the
    H200: every cuda engine failed validation) and its config records None."""
    from samebits.deployment import build_deployment
    from samebits.engine.engine import LLMEngine
    from samebits.model import load_model

    dep = build_deployment(load_model(str(tiny_llama_dir)), "invariant")
    dep = dataclasses.replace(dep, plan=dataclasses.replace(dep.plan, num_threads=0))
    engine = LLMEngine.from_deployment(dep, num_kv_blocks=32)
    assert engine.config.runtime_config.num_threads is None
