"""The `samebits` command: generate, info, serve, verify."""

from __future__ import annotations

import argparse
import json
import sys


def _add_generate(sub) -> None:
    p = sub.add_parser("generate", help="generate text for PROMPT, streaming tokens")
    p.add_argument("prompt")
    p.add_argument(
        "--model", default=None, help="HF folder or .gguf file (default: embedded SmolLM2)"
    )
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument(
        "--no-chat", action="store_true", help="send PROMPT raw, without the chat template"
    )
    _add_plan_arguments(p)


def _add_plan_arguments(p) -> None:
    p.add_argument("--kernel-plan", default="invariant", choices=("invariant", "fast"))
    p.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    p.add_argument("--dtype", default=None, help="float32 on cpu, bfloat16 on cuda (the default)")
    p.add_argument("--threads", type=int, default=None)


def _add_info(sub) -> None:
    p = sub.add_parser("info", help="print the kernel plan and the deployment fingerprint")
    p.add_argument("--model", default=None)
    _add_plan_arguments(p)
    p.add_argument("--json", action="store_true", help="print all fingerprint components as JSON")


def cmd_generate(args: argparse.Namespace) -> int:
    from samebits.llm import LLM
    from samebits.sampling import SamplingParams

    params = SamplingParams(
        max_tokens=args.max_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed
    )
    llm = LLM(
        args.model, kernel_plan=args.kernel_plan, num_threads=args.threads, progress=True,
        device=args.device, dtype=args.dtype,
    )  # fmt: skip
    tok = llm.tokenizer
    if args.no_chat:
        ids = tok.encode(args.prompt, add_special_tokens=True)
    else:
        text = tok.apply_chat_template([{"role": "user", "content": args.prompt}])
        ids = tok.encode(text, add_special_tokens=False)
    shown = 0
    final = None
    for out in llm.generate_stream([ids], params):
        text = out.outputs[0].text
        sys.stdout.write(text[shown:])
        sys.stdout.flush()
        shown = len(text)
        final = out
    completion = final.outputs[0]
    print(
        f"\n[finish_reason={completion.finish_reason} tokens={len(completion.token_ids)} "
        f"seed={completion.seed} fingerprint={final.fingerprint[:16]}]",
        file=sys.stderr,
    )
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    from samebits.config import PlanConfig
    from samebits.deployment import build_deployment
    from samebits.model import load_model, weights_target

    plan = PlanConfig(args.kernel_plan, args.dtype, args.device, args.threads)
    loaded = load_model(args.model, True, weights_target(plan.device, plan.dtype))
    dep = build_deployment(
        loaded, plan.kernel_plan, plan.num_threads, device=plan.device, dtype=plan.dtype
    )
    if args.json:
        print(json.dumps({"fingerprint": dep.fingerprint, **dep.components}, indent=2))
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
    print(f"weights sha256: {dep.components['weights_sha256']}")
    print(f"fingerprint: {dep.fingerprint}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="samebits", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    _add_generate(sub)
    _add_info(sub)
    _add_optional(sub, "serve", "samebits.server.cli", "add_serve_arguments", "serve_main")
    _add_optional(sub, "verify", "samebits.audit.cli", "add_verify_arguments", "verify_main")
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
