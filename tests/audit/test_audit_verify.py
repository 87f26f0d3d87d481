"""`verify_log` and `samebits verify` over logs served by the fake engine."""

from __future__ import annotations

import argparse
import io

import pytest
from fake_engine import FakeEngine
from logtools import load_entries, serve_into_log, tamper

from samebits.audit import read_log
from samebits.audit.cli import add_verify_arguments, run_verify
from samebits.audit.verify import (
    SampleSpec,
    choose_sample,
    detection_probability,
    request_entries,
    verify_log,
)

FP = "fake-fingerprint-0"


def bodies(count: int) -> list[dict]:
    out = []
    for i in range(count):
        body = {
            "prompt": f"prompt number {i}",
            "max_tokens": 4 + i % 5,
            "temperature": (0.0, 0.9)[i % 2],
        }
        if i % 3 == 0:
            body["seed"] = i
        if i % 7 == 0:
            body["n"] = 2
        out.append(body)
    return out


@pytest.fixture(scope="module")
def honest_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("honest") / "audit.jsonl"
    serve_into_log(FakeEngine(FP), path, bodies(40))
    return path


@pytest.fixture
def log_copy(honest_log, tmp_path):
    path = tmp_path / "audit.jsonl"
    path.write_bytes(honest_log.read_bytes())
    return path


def cli(path, *extra: str, engine=None) -> tuple[int, str]:
    parser = argparse.ArgumentParser()
    add_verify_arguments(parser)
    args = parser.parse_args([str(path), "--no-progress", *extra])
    out = io.StringIO()
    code = run_verify(args, lambda engine_args: engine or FakeEngine(FP), out=out)
    return code, out.getvalue()


def test_honest_log_passes(honest_log):
    contents = read_log(honest_log)
    assert len(request_entries(contents)) == 40 + 6  # six requests had n = 2
    report = verify_log(contents, FakeEngine(FP))
    assert report.exit_code == 0
    assert len(report.results) == 46 and all(r.ok for r in report.results)


def test_edited_digest_is_caught_even_with_a_consistent_chain(log_copy):
    def nudge(seq: int, entry: dict) -> bool:
        if seq % 5 != 2 or not entry["logits_digests"]:
            return False
        digest = entry["logits_digests"][-1]
        entry["logits_digests"][-1] = digest[:-1] + ("0" if digest[-1] != "0" else "1")
        return True

    edited = tamper(log_copy, nudge)
    report = verify_log(read_log(log_copy), FakeEngine(FP))
    assert report.chain_issues == []
    assert sorted(r.seq for r in report.failed_results) == edited
    assert all("digest differs" in r.message for r in report.failed_results)
    assert report.exit_code == 1


def test_edited_token_and_truncation_are_caught(log_copy):
    """Entry 3 gets a token changed; the first later entry with >= 2 output tokens (unseeded
    requests draw random seeds, so lengths vary between runs) loses its last token."""
    truncated: list[int] = []

    def edit(seq: int, entry: dict) -> bool:
        if seq == 3:
            entry["output_token_ids"][0] = (entry["output_token_ids"][0] + 1) % 256
            return True
        if seq > 3 and not truncated and len(entry["output_token_ids"]) > 1:
            entry["output_token_ids"].pop()
            entry["logits_digests"].pop()
            truncated.append(seq)
            return True
        return False

    assert tamper(log_copy, edit) == [3, *truncated] and len(truncated) == 1
    failed = {
        r.seq: r.message for r in verify_log(read_log(log_copy), FakeEngine(FP)).failed_results
    }
    assert set(failed) == {3, truncated[0]}
    assert "token differs at position 0" in failed[3]
    assert "replay generated" in failed[truncated[0]]


def test_aborted_entry_passes_as_a_prefix(log_copy):
    def cut(seq: int, entry: dict) -> bool:
        if len(entry["output_token_ids"]) < 3:
            return False
        entry["output_token_ids"] = entry["output_token_ids"][:2]
        entry["logits_digests"] = entry["logits_digests"][:2]
        entry["finish_reason"] = "abort"
        return True

    assert tamper(log_copy, cut)
    assert verify_log(read_log(log_copy), FakeEngine(FP)).exit_code == 0


def test_foreign_fingerprint_is_refused(honest_log):
    code, out = cli(honest_log, engine=FakeEngine("another-deployment"))
    assert code == 2
    assert "refusing to verify" in out and FP in out and "another-deployment" in out
    assert "PASS" not in out


def test_cli_reports_entries_summary_and_detection_table(honest_log):
    code, out = cli(honest_log, "--sample", "10", "--seed", "5")
    assert code == 0
    assert out.count(" PASS ") == 10 and " FAIL " not in out
    assert "replayed 10 of 46 request entries (sample seed 5): 10 passed, 0 failed" in out
    for f in (0.01, 0.05, 0.10):
        assert f"{detection_probability(f, 10):.6f}" in out
    assert "chain: OK" in out


def test_cli_fails_on_a_broken_chain(log_copy):
    lines = log_copy.read_text().splitlines()
    del lines[7]
    log_copy.write_text("\n".join(lines) + "\n")
    code, out = cli(log_copy, "--sample", "0")
    assert code == 1
    assert "dropped" in out


def test_cli_head_check(honest_log):
    head = load_entries(honest_log)[-1]["entry_hash"]
    assert cli(honest_log, "--sample", "0", "--head", head)[0] == 0
    code, out = cli(honest_log, "--sample", "0", "--head", "f" * 64)
    assert code == 1 and "published head" in out


def test_sample_selection(honest_log):
    entries = request_entries(read_log(honest_log))
    first = choose_sample(entries, SampleSpec(count=7), seed=123)
    again = choose_sample(entries, SampleSpec(count=7), seed=123)
    other = choose_sample(entries, SampleSpec(count=7), seed=124)
    assert [e.line_no for e in first] == [e.line_no for e in again]
    assert [e.line_no for e in first] != [e.line_no for e in other]
    assert len(choose_sample(entries, SampleSpec(rate=0.25), seed=1)) == 12  # ceil(0.25 * 46)
    assert len(choose_sample(entries, SampleSpec(), seed=1)) == 46
    with pytest.raises(ValueError):
        SampleSpec(count=3, rate=0.5)


def test_detection_probability():
    assert detection_probability(0.05, 0) == 0.0
    assert detection_probability(0.10, 1) == pytest.approx(0.10)
    assert detection_probability(0.01, 100) == pytest.approx(1 - 0.99**100)


def test_unreadable_log(tmp_path):
    code, _ = cli(tmp_path / "missing.jsonl")
    assert code == 2


def test_corrupt_line_fails_verification(log_copy):
    lines = log_copy.read_text().splitlines()
    lines[5] = lines[5][:-10]
    log_copy.write_text("\n".join(lines) + "\n")
    code, out = cli(log_copy, "--sample", "0")
    assert code == 1 and "corrupt line" in out


def test_served_entries_carry_the_engine_numerics_id(tmp_path):
    engine = FakeEngine(FP)
    engine.numerics_id = "9" * 64
    path = tmp_path / "audit.jsonl"
    serve_into_log(engine, path, bodies(3))
    entries = load_entries(path)
    assert entries and all(e["numerics_id"] == "9" * 64 for e in entries)


NUMERICS = "9" * 64


class OtherMachine:
    """The same numerics on another machine: another fingerprint, the same bits."""

    def __init__(self, engine: FakeEngine, fingerprint: str, numerics_id: str) -> None:
        self._engine = engine
        self.fingerprint = fingerprint
        self.numerics_id = numerics_id

    def __getattr__(self, name: str):
        return getattr(self._engine, name)


@pytest.fixture(scope="module")
def numerics_log(tmp_path_factory):
    engine = FakeEngine(FP)
    engine.numerics_id = NUMERICS
    path = tmp_path_factory.mktemp("numerics") / "audit.jsonl"
    serve_into_log(engine, path, bodies(6))
    return path


def test_same_numerics_on_another_machine_is_replayed(numerics_log):
    code, out = cli(numerics_log, engine=OtherMachine(FakeEngine(FP), "other-machine", NUMERICS))
    assert code == 0 and out.count(" PASS ") == 7 and " FAIL " not in out  # one had n = 2
    assert f"note: 7 entries were served under fingerprint {FP} (another machine)" in out


def test_other_numerics_are_refused_with_both_ids(numerics_log):
    engine = OtherMachine(FakeEngine(FP), "other-machine", "8" * 64)
    code, out = cli(numerics_log, engine=engine)
    assert code == 2 and "refusing to verify" in out and " PASS " not in out
    assert f"local numerics id: {'8' * 64}" in out and FP in out


def test_entries_without_numerics_id_need_the_fingerprint(honest_log):
    code, out = cli(honest_log, engine=OtherMachine(FakeEngine(FP), "other-machine", NUMERICS))
    assert code == 2 and "refusing to verify" in out
