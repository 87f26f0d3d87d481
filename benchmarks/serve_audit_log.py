"""Serve a tiny test checkpoint with `samebits serve` and write its audit log: the GPU-served
logs a CPU verifies (`samebits verify LOG --device cpu --model DIR`, issue 27).

Builds the tests' tiny random checkpoint of `--arch` (tests/tiny_models.py, seeded: the CPU
rebuilds the same bytes) or takes `--model` (e.g. random:llama-3-8b), starts `samebits serve --device DEVICE --audit-log LOG` on it, sends
`--requests` completions of `--max-tokens` tokens each (`ignore_eos`), 8 at a time: even
ones greedy, odd ones sampled at temperature 0.8 with seed = their index; then stops the
server (SIGINT: the log is closed with its head) and writes a summary JSON next to the log.

    python benchmarks/serve_audit_log.py --arch llama --device cuda --log gpu-h200-llama.jsonl
Evidence class: measurement (the log is what a provider's server wrote).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROMPTS = ("The history of", "Once upon a time", "In a distant galaxy", "Numbers: 1, 2, 3,",
           "def main():", "Dear reader,", "The weather today", "A recipe for")  # fmt: skip


def build_checkpoint(arch: str, where: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_models import make_tiny_checkpoint

    return Path(make_tiny_checkpoint(where / f"tiny_{arch}", arch))


def post(port: int, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 json.dumps(body).encode(), {"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def wait_ready(port: int, server: subprocess.Popen, limit_s: float = 300) -> None:
    start = time.time()
    while time.time() - start < limit_s:
        if server.poll() is not None:
            raise RuntimeError(f"the server exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5):
                return
        except OSError:
            time.sleep(1)
    raise RuntimeError("the server did not come up")


def request_body(i: int, model: str, max_tokens: int) -> dict:
    body = {"model": model, "prompt": f"{PROMPTS[i % len(PROMPTS)]} #{i}",
            "max_tokens": max_tokens, "ignore_eos": True}  # fmt: skip
    if i % 2:
        body.update(temperature=0.8, seed=i)
    else:
        body.update(temperature=0.0)
    return body


def require_llguidance() -> None:
    """The numerics id names the llguidance version (it decides guided tokens): a log served
    without it is refused by every verifier that has it, as the package installs it."""
    import importlib.util

    if importlib.util.find_spec("llguidance") is None:
        sys.exit("serve_audit_log.py: llguidance is not installed here (the log's numerics id "
                 "would record it absent); install or carry its wheel")  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", default="llama")
    p.add_argument("--model", default=None,
                   help="serve this model instead of the tiny --arch checkpoint, e.g. "
                        "random:llama-3-8b (drawn the same on the verifier's CPU)")  # fmt: skip
    p.add_argument("--device", default="cuda")
    p.add_argument("--log", required=True, help="audit log to write")
    p.add_argument("--requests", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--port", type=int, default=8765)
    a = p.parse_args()
    require_llguidance()
    ckpt = a.model or build_checkpoint(a.arch, Path(tempfile.mkdtemp()))
    cmd = [sys.executable, "-m", "samebits.cli", "serve", "--model", str(ckpt), "--device",
           a.device, "--port", str(a.port), "--audit-log", a.log, "--served-model-name", "tiny"]  # fmt: skip
    server = subprocess.Popen(cmd, env=dict(os.environ))
    try:
        wait_ready(a.port, server)
        t0 = time.time()
        with ThreadPoolExecutor(8) as pool:
            outs = list(pool.map(lambda i: post(a.port, request_body(i, "tiny", a.max_tokens)),
                                 range(a.requests)))  # fmt: skip
        served_s = time.time() - t0
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(timeout=120)
    tokens = sum(o["usage"]["completion_tokens"] for o in outs)
    summary = {"arch": a.arch, "device": a.device, "requests": len(outs), "tokens": tokens,
               "served_s": round(served_s, 2), "log": a.log,
               "checkpoint": a.model or "tests/tiny_models.py",
               "fingerprint": outs[0].get("samebits", {}).get("fingerprint")}  # fmt: skip
    Path(a.log + ".summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
