"""The `samebits` command: generate, info, serve, verify.

The four commands name the same things the same way (`samebits.engine_args`):
`--model`, `--kernel-plan`, `--device`, `--dtype`, `--num-threads` (`--threads` is a
deprecated alias), `--max-model-len`; generate and serve also take the KV-cache, scheduler
and runtime options. Each command builds one `EngineConfig` from them (`config_from_args`).
"""

from __future__ import annotations

import argparse
import json
import sys

from samebits.engine_args import (  # noqa: F401 - re-exported names of the options
    DEPLOYMENT_OPTIONS,
    DEPRECATED_ALIASES,
    add_deployment_arguments,
    add_engine_arguments,
    add_step_arguments,
    config_from_args,
)


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="generate text for PROMPT, streaming tokens")
    p.add_argument("prompt")
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--no-chat", action="store_true", help="send PROMPT raw, without the chat template"
    )
    add_engine_arguments(p)


def _add_info(sub) -> None:
    p = sub.add_parser("info", help="print the kernel plan and the deployment fingerprint")
    add_deployment_arguments(p)
    add_step_arguments(p)
    p.add_argument("--json", action="store_true", help="print all fingerprint components as JSON")


def cmd_generate(args: argparse.Namespace) -> int:
    from samebits.llm import LLM
    from samebits.outputs import RequestOutputKind
    from samebits.sampling import SamplingParams

    params = SamplingParams(
        max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed
    )
    llm = LLM(config=config_from_args(args), progress=True)
    tok = llm.tokenizer
    if args.no_chat:
        ids = tok.encode(args.prompt, add_special_tokens=True)
    else:
        text = tok.apply_chat_template([{"role": "user", "content": args.prompt}])
        ids = tok.encode(text, add_special_tokens=False)
    num_tokens = 0
    final = None
    for out in llm.generate_stream([ids], params, output_kind=RequestOutputKind.DELTA):
        sys.stdout.write(out.outputs[0].text)  # the new text only
        sys.stdout.flush()
        num_tokens += len(out.outputs[0].token_ids)
        final = out
    completion = final.outputs[0]
    print(
        f"\n[finish_reason={completion.finish_reason} tokens={num_tokens} "
        f"seed={completion.seed} fingerprint={final.fingerprint[:16]}]",
        file=sys.stderr,
    )
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from samebits.deployment import build_deployment
    from samebits.model import load_model, weights_target

    config = config_from_args(args)
    mc, rc = config.model_config, config.runtime_config
    mc.check_device()
    loaded = load_model(mc.model, True, weights_target(mc.device, mc.dtype, mc.kernel_plan))
    dep = build_deployment(
        loaded, mc.kernel_plan, rc.num_threads, mc.max_model_len, device=mc.device,
        dtype=mc.dtype,
    )  # fmt: skip
    max_num_seqs = config.max_num_seqs
    if rc.tensor_parallel_size > 1:
        print(f"note: info builds the TP = 1 deployment; at tensor_parallel_size "
              f"{rc.tensor_parallel_size} the fingerprint is the same", file=sys.stderr)  # fmt: skip
    if args.json:
        graphs = _graphs_line(dep.plan, rc.enforce_eager, max_num_seqs)
        print(json.dumps({"fingerprint": dep.fingerprint, "numerics_id": dep.numerics_id,
                          **dep.components, "graphs": graphs}, indent=2))  # fmt: skip
        return 0
    print(f"model: {dep.loaded.name}")
    print(dep.plan.describe())
    print(
        "qualification: "
        + ", ".join(f"{k}={'pass' if v else 'FAIL'}" for k, v in dep.qualification.items())
    )
    for key, value in dep.components.get("gpu", {}).items():
        print(f"gpu {key}: {value}")
    if dep.components.get("specializations"):
        print("compiled linear specializations (split plan -> launches by M):")
        print("\n".join(f"  {line}" for line in dep.components["specializations"]))
    if dep.plan.device != "cpu":
        from samebits.kernels.triton.certified.gate import certificate_lines

        for line in certificate_lines(dep):
            print(line)
    print(f"weights sha256: {dep.components['weights_sha256']}")
    print(f"fingerprint: {dep.fingerprint}")
    print(f"numerics id: {dep.numerics_id} (what fixes the bits, without the machine)")
    print(_graphs_line(dep.plan, rc.enforce_eager, max_num_seqs))
    return 0


def _graphs_line(plan, enforce_eager: bool, max_num_seqs: int) -> str:
    """How steps run (not in the fingerprint: on the invariant plan a graph replay and an
    eager step give the same bits; tests/gpu/test_gpu_graphs.py checks it on the GPU)."""
    from samebits.graphs.policy import graph_config

    line = graph_config(plan.device, enforce_eager, max_num_seqs).describe()
    return (
        line + f" [for max_num_seqs={max_num_seqs}; not part of the fingerprint]"
        if plan.device == "cuda"
        else line
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="samebits", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_generate(sub)
    _add_info(sub)
    _add_optional(sub, "serve", "samebits.server.cli", "add_serve_arguments", "serve_main")
    _add_optional(sub, "verify", "samebits.audit.cli", "add_verify_arguments", "verify_main")
    _add_optional(
        sub, "certify", "samebits.analysis.certify_cli", "add_certify_arguments", "certify_main"
    )
    return parser


def _add_optional(sub, name: str, module: str, add: str, main: str) -> None:
    import importlib

    try:
        mod = importlib.import_module(module)
    except ImportError:
        return
    p = sub.add_parser(
        name, help=(mod.__doc__ or "").strip().splitlines()[0] if mod.__doc__ else None
    )
    getattr(mod, add)(p)
    p.set_defaults(func=getattr(mod, main))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handlers = {"generate": cmd_generate, "info": cmd_info}
    func = handlers.get(args.command) or args.func
    try:
        return int(func(args) or 0)
    except (ValueError, FileNotFoundError) as exc:
        print(f"samebits: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
