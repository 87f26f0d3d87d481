"""Audit logs served on an sm_90 GPU (`samebits serve --device cuda`, the invariant plan, by
benchmarks/serve_audit_log.py) are verified on this CPU by `samebits verify --device cpu`:
the replay plan has the GPU deployment's numerics id and recomputes its logits' bits.

The logs (tests/data/audit) were served from the tests' tiny random checkpoints, which the
CPU rebuilds byte for byte (`make_tiny_checkpoint`, seeded); the current ones on an H100 on
2026-12-07 (an H200 and an H100 share the numerics id: capability 9.0, the same kernels; only
the fingerprint's machine part differs). A kernel source, plan or model-config change
invalidates them (the certificates are not part of the numerics id): re-serve with
`benchmarks/gpu_session.sh auditlogs`.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

import pytest
from logtools import load_entries, reseal

from samebits.audit.cli import add_verify_arguments, build_engine, build_forced_engine, run_verify
from tiny_models import make_tiny_checkpoint

LOGS = Path(__file__).resolve().parents[1] / "data" / "audit"
ARCHS = ("llama", "qwen3")


def _log(arch: str) -> Path:
    return LOGS / f"audit-gpu-tiny-{arch}.jsonl"


FACTORIES = {"stepwise": build_engine, "forced": build_forced_engine}


def _verify(log: Path, ckpt: Path, *extra: str, mode: str = "forced") -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    add_verify_arguments(parser)
    args = parser.parse_args([str(log), "--device", "cpu", "--model", str(ckpt), "--no-progress",
                              *extra])  # fmt: skip
    out = io.StringIO()
    return run_verify(args, FACTORIES[mode], out), out.getvalue()


def _verdicts(out: str, verdict: str) -> list[int]:
    """The seqs of the report's per-entry lines with this verdict (`report.format_result`)."""
    rows = [line.split() for line in out.splitlines() if line.startswith("  seq ")]
    return sorted(int(r[1]) for r in rows if r[2] == verdict)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny")
    return {arch: Path(make_tiny_checkpoint(root / f"tiny_{arch}", arch)) for arch in ARCHS}


def test_the_logs_were_served_on_the_gpu_invariant_plan():
    for arch in ARCHS:
        session = load_entries(_log(arch))[0]
        assert session["type"] == "session"
        assert session["engine_args"]["device"] == "cuda"
        assert session["engine_args"]["kernel_plan"] == "invariant"


@pytest.mark.parametrize("mode", FACTORIES)
@pytest.mark.parametrize("arch", ARCHS)
def test_a_cpu_verifies_a_gpu_served_log(arch, mode, checkpoints):
    """16 sampled entries replayed on the CPU, teacher-forced and step by step: every one
    PASSes, exit 0, accepted by the numerics id (the fingerprints differ: another machine)."""
    code, out = _verify(_log(arch), checkpoints[arch], "--sample", "16", "--seed", "0", mode=mode)
    assert code == 0, out
    assert len(_verdicts(out, "PASS")) == 16 and _verdicts(out, "FAIL") == [], out
    assert "another machine" in out and "16 passed, 0 failed" in out and "result: PASS" in out


@pytest.mark.parametrize("mode", FACTORIES)
def test_an_edited_gpu_log_fails_on_the_cpu(tmp_path, mode, checkpoints):
    """A provider's edit, re-sealed so the chain holds: one output token of a sampled entry
    and one logits digest of a greedy one. Exactly the two edited entries FAIL, exit 1."""
    entries = load_entries(_log("llama"))
    kept = [entries[0]] + [e for e in entries if e["type"] == "request"][:4]
    sampled = next(e for e in kept[1:] if e["sampling_params"]["temperature"] > 0)
    greedy = next(e for e in kept[1:] if e["sampling_params"]["temperature"] == 0)
    sampled["output_token_ids"][5] = (sampled["output_token_ids"][5] + 1) % 320
    greedy["logits_digests"][3] = "0" * 64
    log = tmp_path / "edited.jsonl"
    reseal(log, kept)
    code, out = _verify(log, checkpoints["llama"], mode=mode)
    assert code == 1, out
    assert _verdicts(out, "FAIL") == sorted([sampled["seq"], greedy["seq"]]), out
    assert len(_verdicts(out, "PASS")) == 2 and "result: FAIL" in out, out
