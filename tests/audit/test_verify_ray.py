"""`samebits verify LOG --ray auto`: the replays on 2 local Ray workers give the serial
run's report, line for line (PASS/FAIL lines in entry order, the same summary)."""

from __future__ import annotations

import argparse
import io

import pytest
from logtools import load_entries, reseal, serve_into_log

from samebits.audit.cli import add_verify_arguments, build_engine, run_verify
from samebits.engine.engine import LLMEngine
from samebits.model import load_model


def bodies(count: int) -> list[dict]:
    return [
        {"prompt": f"ray prompt {i}", "max_tokens": 3 + i % 4, "temperature": (0.0, 0.8)[i % 2],
         "seed": i}
        for i in range(count)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def tiny_log(tmp_path_factory, tiny_llama_dir):
    path = tmp_path_factory.mktemp("ray") / "audit.jsonl"
    engine = LLMEngine.from_loaded(load_model(tiny_llama_dir), enable_prefix_caching=False)
    serve_into_log(engine, path, bodies(8))
    return path


def verify(path, model_dir, *extra: str) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    add_verify_arguments(parser)
    args = parser.parse_args([str(path), "--no-progress", "--model", str(model_dir), *extra])
    out = io.StringIO()
    return run_verify(args, build_engine, out=out), out.getvalue()


def tampered(path, tmp_path):
    """The log with one entry's digest edited and its chain resealed from there on."""
    entries = load_entries(path)
    victim = next(e for e in entries if e["type"] == "request" and e["seq"] == 5)
    victim["logits_digests"][0] = "0" * 64
    copy = tmp_path / "audit.jsonl"
    reseal(copy, entries)
    return copy


def test_ray_report_equals_the_serial_report(tiny_log, tiny_llama_dir, tmp_path):
    log = tampered(tiny_log, tmp_path)  # one FAIL line among the PASS lines
    serial_code, serial = verify(log, tiny_llama_dir, "--seed", "11")
    ray_code, on_ray = verify(log, tiny_llama_dir, "--seed", "11", "--ray", "auto",
                              "--ray-workers", "2")  # fmt: skip
    assert serial_code == ray_code == 1
    assert serial.count(" PASS ") == 7 and serial.count(" FAIL ") == 1
    assert "seq 5" in next(line for line in serial.splitlines() if " FAIL " in line)
    assert on_ray == serial


def relabelled(path, tmp_path, **fields):
    entries = load_entries(path)
    for e in entries:
        e.update(fields)
    out = tmp_path / "audit.jsonl"
    reseal(out, entries)
    return out


def test_ray_refuses_other_numerics(tiny_log, tiny_llama_dir, tmp_path):
    log = relabelled(tiny_log, tmp_path, fingerprint="f" * 64, numerics_id="e" * 64)
    code, out = verify(log, tiny_llama_dir, "--ray", "auto", "--ray-workers", "1")
    assert code == 2 and "refusing to verify" in out and " PASS " not in out


def test_same_numerics_from_another_machine_passes(tiny_log, tiny_llama_dir, tmp_path):
    """The real engine records its numerics id: a log whose fingerprint (machine) differs but
    whose numerics id is this deployment's is replayed, bit for bit."""
    log = relabelled(tiny_log, tmp_path, fingerprint="f" * 64)
    code, out = verify(log, tiny_llama_dir, "--sample", "3", "--seed", "2")
    assert code == 0 and out.count(" PASS ") == 3
    assert f"under fingerprint {'f' * 64} (another machine)" in out


def test_bad_worker_count_is_refused(tiny_log, tiny_llama_dir, capsys):
    code, out = verify(tiny_log, tiny_llama_dir, "--ray", "auto", "--ray-workers", "0")
    assert code == 2 and out == ""
    assert "--ray-workers must be >= 1" in capsys.readouterr().err
