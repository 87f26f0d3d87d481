"""Serve the model over an OpenAI-compatible HTTP API (`samebits serve`).

Binds to 127.0.0.1 by default. Every served request is appended to the audit log (path
printed at start-up, head hash printed at shutdown) unless `--no-audit-log` is given.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path
from typing import Any

from samebits.audit.record import session_record
from samebits.audit.writer import DEFAULT_MAX_BYTES, AuditLogWriter, default_audit_log_path
from samebits.server.config import (
    DEFAULT_MAX_BODY_BYTES,
    DEFAULT_TIMEOUT_KEEP_ALIVE_S,
    ServerConfig,
)
from samebits.tools.parsers import PARSERS

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Arguments of `samebits serve`."""
    from samebits.engine_args import add_engine_arguments

    add = parser.add_argument
    add_engine_arguments(parser)
    add("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    add("--port", type=int, default=8000)
    add("--api-key", default=None,
        help="require 'Authorization: Bearer KEY' (default: $SAMEBITS_API_KEY, else none)")  # fmt: skip
    add("--served-model-name", action="append", default=None,
        help="model name(s) clients use (default: the model's name); repeatable")  # fmt: skip
    add("--audit-log", default=None, help=f"audit log path (default: {default_audit_log_path()})")
    add("--no-audit-log", action="store_true", help="serve without an audit log")
    add(
        "--audit-max-bytes",
        type=int,
        default=DEFAULT_MAX_BYTES,
        help="rotate segments at this size",
    )
    add("--max-n", type=int, default=16, help="largest n accepted")
    add("--max-tokens-limit", type=int, default=None, help="largest max_tokens accepted")
    add("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES)
    add("--tool-call-parser", default=None, choices=tuple(PARSERS),
        help="format of the model's tool calls (default: the model family's: qwen -> hermes, "
             "llama -> llama3_json, mistral/mixtral -> mistral)")  # fmt: skip
    add("--timeout-keep-alive", type=float, default=DEFAULT_TIMEOUT_KEEP_ALIVE_S, metavar="S",
        help="seconds an idle keep-alive connection stays open (above clients' own expiry)")  # fmt: skip
    add("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))


def engine_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """`LLMEngine.from_args` keyword arguments from the command line (see
    `samebits.engine_args.config_from_args` for the config built from them)."""
    from samebits.engine_args import engine_kwargs as flat

    return flat(args)


def session_engine_args(args: argparse.Namespace) -> dict[str, Any]:
    """What a verifier needs to rebuild the deployment (recorded in the session entry)."""
    model = None if args.model is None else _logged_model(args.model)
    return {
        "model": model,
        "kernel_plan": args.kernel_plan,
        "device": args.device,
        "dtype": args.dtype,
        "num_threads": args.num_threads,
        "max_model_len": args.max_model_len,
    }


def _logged_model(model: str) -> str:
    """A path made absolute (a verifier may run elsewhere); a random spec as given."""
    from samebits.model.loader import is_random_spec

    return model if is_random_spec(model) else str(Path(model).resolve())


def serve_main(args: argparse.Namespace) -> int:
    """Entry point of `samebits serve`; returns the exit code."""
    import uvicorn

    from samebits.engine.engine import LLMEngine
    from samebits.engine_args import config_from_args
    from samebits.server.app import build_app

    engine = LLMEngine.from_args(config=config_from_args(args), progress=True)
    config = server_config(args, engine)
    writer = open_audit_log(args, engine)
    _announce(args, engine, config, writer)
    app = build_app(engine, config, writer)
    try:
        uvicorn.run(
            app, host=args.host, port=args.port, log_level=args.log_level,
            timeout_keep_alive=args.timeout_keep_alive,
        )  # fmt: skip
    finally:
        if writer is not None:
            head = writer.close()
            print(f"audit log head: seq {head.seq} entry_hash {head.entry_hash}", file=sys.stderr)
    return 0


def server_config(args: argparse.Namespace, engine: Any) -> ServerConfig:
    names = tuple(args.served_model_name or (str(engine.model_name),))
    return ServerConfig(
        model_names=names,
        api_key=args.api_key or os.environ.get("SAMEBITS_API_KEY") or None,
        max_n=args.max_n,
        max_body_bytes=args.max_body_bytes,
        max_tokens_limit=args.max_tokens_limit,
        tool_call_parser=args.tool_call_parser,
    )


def open_audit_log(args: argparse.Namespace, engine: Any) -> AuditLogWriter | None:
    """Open (or resume) the audit log and append this server's session entry."""
    if args.no_audit_log:
        return None
    path = Path(args.audit_log) if args.audit_log else default_audit_log_path()
    writer = AuditLogWriter(path, max_bytes=args.audit_max_bytes)
    record = session_record(
        str(engine.fingerprint), str(engine.model_name), session_engine_args(args), time.time(),
        getattr(engine, "numerics_id", None),
    )  # fmt: skip
    writer.append(record).result()
    return writer


def _tool_line(config: ServerConfig, engine: Any) -> str:
    from samebits.server.tools import model_type, served_parser_name

    name = served_parser_name(config.tool_call_parser, engine)
    if name is None:
        return f"no parser for model_type {model_type(engine)!r} (pass --tool-call-parser)"
    origin = "--tool-call-parser" if config.tool_call_parser else f"{model_type(engine)}'s default"
    return f"parser {name} ({origin})"


def _announce(args: argparse.Namespace, engine: Any, config: ServerConfig, writer: Any) -> None:
    lines = [
        f"samebits serve: model {engine.model_name} as {list(config.model_names)}",
        f"  fingerprint: {engine.fingerprint}",
        f"  audit log:   {writer.path if writer is not None else 'disabled (--no-audit-log)'}",
        f"  tool calls:  {_tool_line(config, engine)}",
        f"  listening:   http://{args.host}:{args.port}/v1",
    ]
    engine_config = getattr(engine, "config", None)
    if engine_config is not None:
        cache, sched = engine_config.cache_config, engine_config.scheduler_config
        lines.append(
            f"  engine:      max_num_seqs {sched.max_num_seqs}, max_num_batched_tokens "
            f"{sched.max_num_batched_tokens}, max_model_len {sched.max_model_len}, "
            f"{cache.num_kv_blocks} KV blocks of {cache.block_size}, prefix caching "
            f"{'on' if cache.enable_prefix_caching else 'off'}"
        )
    graphs = getattr(engine.runner, "graphs", None)
    if graphs is not None:
        lines.append(f"  {graphs.config.describe()}")
    if args.host not in LOOPBACK and config.api_key is None:
        lines.append("  WARNING: bound beyond loopback without --api-key: anyone can use it")
    print("\n".join(lines), file=sys.stderr, flush=True)
