"""One name per option across the CLIs (issue 10.11): `samebits generate / info / serve /
verify` take the same deployment options, `--threads` still works (deprecated), and each
command passes them on under the same names."""

from __future__ import annotations

import argparse

import pytest

from samebits.cli import DEPLOYMENT_OPTIONS, build_parser

COMMANDS = {
    "generate": ["generate", "hi"],
    "info": ["info"],
    "serve": ["serve"],
    "verify": ["verify", "audit.jsonl"],
}
VALUES = [
    "--model", "m.gguf", "--kernel-plan", "fast", "--device", "cuda", "--dtype", "float16",
    "--num-threads", "3", "--max-model-len", "77",
]  # fmt: skip
EXPECTED = dict(
    model="m.gguf", kernel_plan="fast", device="cuda", dtype="float16", num_threads=3,
    max_model_len=77,
)  # fmt: skip


def subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_the_same_deployment_options(command):
    options = {s for a in subparser(command)._actions for s in a.option_strings}
    assert set(DEPLOYMENT_OPTIONS) <= options
    args = build_parser().parse_args(COMMANDS[command] + VALUES)
    for dest, value in EXPECTED.items():
        assert getattr(args, dest) == value, (command, dest)
    assert not hasattr(args, "threads")


@pytest.mark.parametrize("command", COMMANDS)
def test_threads_is_a_deprecated_alias(command, capsys):
    args = build_parser().parse_args(COMMANDS[command] + ["--threads", "2"])
    assert args.num_threads == 2
    assert "--threads is deprecated, use --num-threads" in capsys.readouterr().err
    build_parser().parse_args(COMMANDS[command] + ["--num-threads", "2"])
    assert "deprecated" not in capsys.readouterr().err


def test_defaults():
    for command in ("generate", "info", "serve"):
        args = build_parser().parse_args(COMMANDS[command])
        assert (args.model, args.kernel_plan, args.device, args.dtype) == (
            None, "invariant", "cpu", None,
        ), command  # fmt: skip
        assert (args.num_threads, args.max_model_len) == (None, None)
    # verify inherits what the audit log's session entry recorded unless overridden
    args = build_parser().parse_args(COMMANDS["verify"])
    assert all(getattr(args, dest) is None for dest in EXPECTED)


def test_the_commands_pass_the_options_on_by_the_same_names(tmp_path):
    from samebits.audit.cli import replay_engine_args
    from samebits.audit.reader import LogContents
    from samebits.server.cli import engine_kwargs, session_engine_args

    serve = build_parser().parse_args(COMMANDS["serve"] + VALUES)
    kwargs = engine_kwargs(serve)
    session = session_engine_args(serve)
    verify = build_parser().parse_args(COMMANDS["verify"] + VALUES[2:])
    replay = replay_engine_args(LogContents(), verify)
    for dest, value in EXPECTED.items():
        if dest != "model":
            assert kwargs[dest] == value == replay[dest], dest
        assert dest in session


def test_bad_values_are_refused(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["info", "--num-threads", "two"])
    with pytest.raises(SystemExit):
        build_parser().parse_args(["serve", "--device", "tpu"])
    assert "invalid" in capsys.readouterr().err


def _session_log(**engine_args):
    from types import SimpleNamespace

    entry = {"type": "session", "engine_args": {"model": None, **engine_args}}
    return SimpleNamespace(entries=[SimpleNamespace(entry=entry)])


def test_verify_device_cpu_replays_a_gpu_invariant_log_with_the_replay_plan():
    from samebits.audit.cli import replay_engine_args

    gpu_log = _session_log(kernel_plan="invariant", device="cuda", dtype="bfloat16")
    on_cpu = build_parser().parse_args(COMMANDS["verify"] + ["--device", "cpu"])
    assert replay_engine_args(gpu_log, on_cpu)["kernel_plan"] == "replay"
    # the log's own device, an explicit plan, or a log of another plan: no replay plan
    as_logged = build_parser().parse_args(COMMANDS["verify"])
    assert replay_engine_args(gpu_log, as_logged)["kernel_plan"] == "invariant"
    explicit = build_parser().parse_args(
        COMMANDS["verify"] + ["--device", "cpu", "--kernel-plan", "invariant"]
    )
    assert replay_engine_args(gpu_log, explicit)["kernel_plan"] == "invariant"
    fast_log = _session_log(kernel_plan="fast", device="cuda", dtype="bfloat16")
    assert replay_engine_args(fast_log, on_cpu)["kernel_plan"] == "fast"
