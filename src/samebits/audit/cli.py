"""`samebits verify AUDIT_LOG`: command-line arguments and entry point.

A log served by the GPU invariant plan is verified on a CPU with ``--device cpu``: the
replay plan (cpu/replay) computes the GPU's bits, and its numerics id is the GPU
deployment's, so the log's entries are accepted when they match it.

Exit codes: 0 every check passed; 1 a chain problem, a corrupt line or a replay mismatch;
2 refused (the log's fingerprint is not the local deployment's), the log is unreadable or
the Ray pool (`--ray`) could not be built. With `--ray ADDRESS` the sampled replays run on
Ray workers (`audit/ray_verify.py`) and the report is the serial run's, line for line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from samebits.audit.reader import LogContents, read_log
from samebits.audit.replay import ReplayEngine
from samebits.audit.report import format_header, format_refusal, format_result, format_summary
from samebits.audit.verify import (
    SampleSpec,
    VerifyReport,
    check_log,
    choose_sample,
    replay_sample,
    request_entries,
)

EngineFactory = Callable[[dict[str, Any]], ReplayEngine]
FINGERPRINT_ARGS = ("kernel_plan", "device", "dtype", "num_threads", "max_model_len")
REPLAY_MODES = ("forced", "stepwise")


def add_verify_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `samebits verify`."""
    parser.add_argument("audit_log", metavar="AUDIT_LOG", help="audit log (active segment path)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--sample-rate", type=float, metavar="P", help="replay a fraction P")
    group.add_argument("--sample", type=int, metavar="K", help="replay K random entries")
    parser.add_argument("--seed", type=int, help="seed of the random sample (default: random)")
    parser.add_argument("--head", help="published head hash the log must end with")
    from samebits.engine_args import add_deployment_arguments

    add_deployment_arguments(parser, inherit=True)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--ray", metavar="ADDRESS",
        help="replay on Ray workers: 'auto' starts a local cluster, 'cluster' joins this "
        "node's running one, else a ray.init address (needs samebits[ray])",
    )  # fmt: skip
    parser.add_argument(
        "--ray-workers", type=int, metavar="N", help="Ray replay workers (default: the CPUs)"
    )
    parser.add_argument(
        "--replay", choices=REPLAY_MODES, default="forced",
        help="forced (default): each entry's rows from chunked passes over its logged tokens, "
        "then sampled and stopped as served (the same verdict, far fewer forward passes); "
        "stepwise: one decode step per token, as served",
    )  # fmt: skip


def verify_main(args: argparse.Namespace) -> int:
    """Entry point of `samebits verify`; returns the exit code."""
    forced = getattr(args, "replay", "forced") == "forced"
    return run_verify(args, build_forced_engine if forced else build_engine)


def build_engine(engine_args: dict[str, Any]) -> ReplayEngine:
    """A cold `LLMEngine` for replays (no prefix caching: each replay runs from scratch)."""
    from samebits.engine.engine import LLMEngine

    return LLMEngine.from_args(**engine_args, enable_prefix_caching=False)


def build_forced_engine(engine_args: dict[str, Any]) -> ReplayEngine:
    """`build_engine` replaying teacher-forced (`audit/forced.py`), or step by step, said on
    stderr, where the engine cannot (the fast plan, tensor parallelism)."""
    from samebits.audit.forced import ForcedReplayEngine, forced_unsupported

    engine = build_engine(engine_args)
    why = forced_unsupported(engine)
    if why is not None:
        print(f"samebits verify: replaying step by step: {why}", file=sys.stderr)
        return engine
    return ForcedReplayEngine(engine)


def run_verify(
    args: argparse.Namespace,
    engine_factory: EngineFactory,
    out: TextIO | None = None,
) -> int:
    """`verify_main` with the engine construction injected (tests pass a fake)."""
    out = out or sys.stdout
    try:
        spec = SampleSpec(count=args.sample, rate=args.sample_rate, seed=args.seed)
        contents = read_log(args.audit_log)
    except (ValueError, OSError) as exc:
        print(f"samebits verify: {exc}", file=sys.stderr)
        return 2
    engine_args = replay_engine_args(contents, args)
    if getattr(args, "ray", None):
        return _run_on_ray(args, contents, spec, engine_factory, engine_args, out)
    engine = engine_factory(engine_args)
    numerics = str(getattr(engine, "numerics_id", "") or "")
    report = _check(args, contents, spec, engine.fingerprint, out, numerics)
    if report.refused:
        return report.exit_code
    bar = _progress_bar(spec.size(report.num_requests), args.no_progress)
    replay_sample(report, contents, engine, spec, on_result=_printer(bar, out))
    bar.close()
    print("\n".join(format_summary(report)), file=out)
    return report.exit_code


def _check(
    args: argparse.Namespace, contents: LogContents, spec: SampleSpec, fingerprint: str,
    out: TextIO, numerics_id: str = "",
) -> VerifyReport:  # fmt: skip
    """The checks before any replay, with the header (and a refusal) printed."""
    report = check_log(contents, fingerprint, spec, args.head, numerics_id)
    print("\n".join(format_header(report, args.audit_log)), file=out, flush=True)
    if report.refused:
        print("\n".join(format_refusal(report)), file=out)
    return report


def _run_on_ray(
    args: argparse.Namespace, contents: LogContents, spec: SampleSpec,
    engine_factory: EngineFactory, engine_args: dict[str, Any], out: TextIO,
) -> int:  # fmt: skip
    """`run_verify` with the sample replayed on a Ray pool (same report text)."""
    try:
        from samebits.audit.ray_verify import RayOptions, RayReplayPool

        pool = RayReplayPool(RayOptions(args.ray, args.ray_workers), engine_factory, engine_args)
    except ImportError as exc:
        print(f"samebits verify --ray needs Ray (pip install 'samebits[ray]'): {exc}",
              file=sys.stderr)  # fmt: skip
        return 2
    except Exception as exc:  # no cluster, a worker's engine failed to build, disagreeing workers
        print(f"samebits verify --ray: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    try:
        report = _check(args, contents, spec, pool.fingerprint, out, pool.numerics_id)
        if report.refused:
            return report.exit_code
        sample = choose_sample(request_entries(contents), spec, report.sample_seed)
        bar = _progress_bar(len(sample), args.no_progress)
        on_result = _printer(bar, out)
        for result in pool.replay_in_order(sample):
            report.results.append(result)
            on_result(result)
        bar.close()
    finally:
        pool.close()
    print("\n".join(format_summary(report)), file=out)
    return report.exit_code


def replay_engine_args(contents: LogContents, args: argparse.Namespace) -> dict[str, Any]:
    """Engine arguments: the last session entry's, overridden by the command line.

    The model path from the log is used only if it exists here; otherwise the default model.
    """
    logged: dict[str, Any] = {}
    for logged_entry in contents.entries:
        if logged_entry.entry.get("type") == "session":
            logged = dict(logged_entry.entry.get("engine_args") or {})
    engine_args = {k: logged[k] for k in FINGERPRINT_ARGS if logged.get(k) is not None}
    for key in FINGERPRINT_ARGS:
        if getattr(args, key, None) is not None:
            engine_args[key] = getattr(args, key)
    if _replays_gpu_log(logged, engine_args, args):
        engine_args["kernel_plan"] = "replay"  # the GPU invariant plan's bits on this CPU
    model = args.model or logged.get("model")
    if args.model is None and model is not None and not _available(model):
        model = None
    engine_args["model"] = model
    if getattr(args, "tensor_parallel_size", None):  # topology: the verifier's own choice
        engine_args["tensor_parallel_size"] = args.tensor_parallel_size
    return engine_args


def _available(model: str) -> bool:
    """A logged model this machine can load: a path that exists here, or a preset's random
    weights (``random:<preset>[:seed<n>]``, drawn the same on every machine)."""
    from samebits.model.loader import is_random_spec

    return is_random_spec(model) or Path(model).exists()


def _replays_gpu_log(logged: dict[str, Any], engine_args: dict[str, Any], args) -> bool:
    """``--device cpu`` on a log of the GPU invariant plan (and no ``--kernel-plan``): the
    replay plan, whose numerics id is that GPU deployment's (`kernels/replay/plan.py`)."""
    gpu_log = (
        logged.get("device") == "cuda" and logged.get("kernel_plan", "invariant") == "invariant"
    )
    asked_cpu = (
        getattr(args, "device", None) == "cpu" and getattr(args, "kernel_plan", None) is None
    )
    return gpu_log and asked_cpu and engine_args.get("device") == "cpu"


def _progress_bar(total: int, disabled: bool) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc="replaying", unit="entry", disable=disabled or None)


def _printer(bar: Any, out: TextIO) -> Callable[[Any], None]:
    def on_result(result: Any) -> None:
        bar.write(format_result(result), file=out)
        bar.update(1)

    return on_result
