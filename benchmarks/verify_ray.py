"""`samebits verify`: serial replay vs `--ray auto` with N local workers, on one log.

Serves `--requests` (default 200) seeded requests through a cold engine into a fresh audit
log (records written as the server writes them: `audit.record.request_record`), then runs
`samebits verify LOG` serially and with `--ray auto --ray-workers N`, timing both (the Ray
time includes starting the cluster and building one engine per worker), and checks that the
two reports are the same text. Model: `--model PATH`, or `--tiny` (the tests' tiny random
llama, built into a temp dir; needs tests/ on the path), else the default model.

    python benchmarks/verify_ray.py --tiny --workers 2 --out verify_ray.json
Writes JSON to --out (default $OUT/verify_ray.json). CPU only. Evidence class: measurement.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from samebits.audit.cli import (  # noqa: E402
    add_verify_arguments,
    build_engine,
    build_forced_engine,
    run_verify,
)
from samebits.audit.record import ServedRequest, request_record  # noqa: E402
from samebits.audit.writer import AuditLogWriter  # noqa: E402
from samebits.sampling import SamplingParams  # noqa: E402

FACTORIES = {"forced": build_forced_engine, "stepwise": build_engine}


def engine_args(model: str | None, threads: int | None) -> dict:
    return {"model": model, **({"num_threads": threads} if threads else {})}


def make_log(model: str | None, path: Path, count: int, max_tokens: int,
             threads: int | None = None) -> str:  # fmt: skip
    """Serve `count` requests (all at once, batched) into the audit log at `path`; returns
    the deployment fingerprint."""
    engine = build_engine(engine_args(model, threads))
    for i in range(count):
        params = SamplingParams(max_tokens=max_tokens, temperature=(0.0, 0.8)[i % 2], seed=i)
        engine.add_request(f"req-{i}", [1 + (7 * i + j) % 50 for j in range(4 + i % 9)], params)
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                done[int(out.request_id.split("-")[1])] = out
    writer = AuditLogWriter(path, fsync=False)
    now = time.time()
    for i in sorted(done):
        out, choice = done[i], done[i].outputs[0]
        params = SamplingParams(max_tokens=max_tokens, temperature=(0.0, 0.8)[i % 2], seed=i)
        served = ServedRequest(
            out.request_id, "/v1/completions", None, now, now, list(out.prompt_token_ids),
            params.to_dict(), list(choice.token_ids), list(choice.logits_digests),
            choice.finish_reason or "abort",
        )  # fmt: skip
        writer.append(request_record(served, engine.fingerprint, "bench", engine.numerics_id))
    writer.close()
    return str(engine.fingerprint)


def verify(log: Path, model: str | None, mode: str, *extra: str) -> tuple[int, str, float]:
    parser = argparse.ArgumentParser()
    add_verify_arguments(parser)
    model_args = ["--model", model] if model else []
    args = parser.parse_args([str(log), "--no-progress", "--seed", "1", *model_args, *extra])
    out = io.StringIO()
    t0 = time.perf_counter()
    code = run_verify(args, FACTORIES[mode], out=out)
    return code, out.getvalue(), time.perf_counter() - t0


def ray_phases(log: Path, args: dict, workers: int, mode: str) -> dict[str, float]:
    """The Ray run split: cluster start + one engine per worker, then the replays alone."""
    from samebits.audit.ray_verify import RayOptions, RayReplayPool
    from samebits.audit.reader import read_log
    from samebits.audit.verify import request_entries

    entries = request_entries(read_log(log))
    t0 = time.perf_counter()
    pool = RayReplayPool(RayOptions("auto", workers), FACTORIES[mode], args)
    t1 = time.perf_counter()
    try:
        results = list(pool.replay_in_order(entries))
    finally:
        pool.close()
    t2 = time.perf_counter()
    assert all(r.ok for r in results), [r for r in results if not r.ok][:2]
    return {"ray_start_s": round(t1 - t0, 3), "ray_replay_s": round(t2 - t1, 3)}


def serial_phases_of(log: Path, args: dict, mode: str) -> dict[str, float]:
    """The serial run split the same way: one engine built, then the replays alone."""
    from samebits.audit.reader import read_log
    from samebits.audit.replay import replay_entry
    from samebits.audit.verify import request_entries

    entries = request_entries(read_log(log))
    t0 = time.perf_counter()
    engine = FACTORIES[mode](args)
    t1 = time.perf_counter()
    results = [replay_entry(engine, e) for e in entries]
    t2 = time.perf_counter()
    assert all(r.ok for r in results), [r for r in results if not r.ok][:2]
    return {"serial_build_s": round(t1 - t0, 3), "serial_replay_s": round(t2 - t1, 3)}


def tiny_model(directory: Path) -> str:
    sys.path.insert(0, str(ROOT / "tests"))
    from tiny_models import make_tiny_checkpoint

    return str(make_tiny_checkpoint(directory, "llama"))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="model folder (default: the default model)")
    p.add_argument("--tiny", action="store_true", help="the tests' tiny random llama")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument(
        "--num-threads", type=int, help="threads of every engine (serve, serial, workers)"
    )
    p.add_argument("--replay", choices=FACTORIES, default="forced")
    p.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "verify_ray.json"))
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = tiny_model(Path(tmp) / "tiny") if a.tiny else a.model
        log = Path(tmp) / "audit.jsonl"
        t0 = time.perf_counter()
        fingerprint = make_log(model, log, a.requests, a.max_tokens, a.num_threads)
        serve_s = time.perf_counter() - t0
        threads = ["--num-threads", str(a.num_threads)] if a.num_threads else []
        serial_code, serial, serial_s = verify(log, model, a.replay, *threads)
        ray_code, on_ray, ray_s = verify(log, model, a.replay, *threads, "--ray", "auto",
                                         "--ray-workers", str(a.workers))  # fmt: skip
        phases = ray_phases(log, engine_args(model, a.num_threads), a.workers, a.replay)
        serial_phases = serial_phases_of(log, engine_args(model, a.num_threads), a.replay)
    result = {
        "model": "tiny-llama" if a.tiny else (a.model or "default"),
        "requests": a.requests, "max_tokens": a.max_tokens, "workers": a.workers,
        "num_threads": a.num_threads, "replay": a.replay, **serial_phases,
        "cpus": os.cpu_count(), "fingerprint": fingerprint, "serve_s": round(serve_s, 3),
        "serial_s": round(serial_s, 3), "ray_s": round(ray_s, 3),
        "speedup": round(serial_s / ray_s, 3), **phases,
        "replay_speedup": round(serial_phases["serial_replay_s"] / phases["ray_replay_s"], 3),
        "serial_exit": serial_code, "ray_exit": ray_code,
        "reports_equal": serial == on_ray, "passed": serial.count(" PASS "),
        "failed": serial.count(" FAIL "),
    }  # fmt: skip
    Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    if not result["reports_equal"] or serial_code != 0:
        sys.exit(1)


if __name__ == "__main__":
    main()
