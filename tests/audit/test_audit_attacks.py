"""Attack demonstrations on the tiny random llama: each dishonest provider is caught in every
sampled affected entry, while an honest log of 200 requests served under concurrency passes
with no false alarm.

(a) a perturbed model (one weight moved by one ulp), (b) logit steganography (rows nudged by
one float32 ulp, < 1e-6 relative, at secret positions), (c) the `fast` kernel plan served
under the invariant plan's fingerprint, (d) edited, dropped or reordered entries.
Ground truth for "affected" comes from a batched run of the logged inputs on the honest
deployment (a different execution path from the verifier's run-alone replays).
"""

from __future__ import annotations

import dataclasses
import hashlib

import numpy as np
import pytest
import torch
from fake_engine import FakeEngine  # noqa: F401  (keeps the server test helpers importable)
from logtools import load_entries, reseal, serve_into_log

from samebits.audit import check_chain, read_log
from samebits.audit.verify import verify_log
from samebits.engine.engine import LLMEngine
from samebits.engine.step_result import ReadyStep, StepLogits
from samebits.model.loader import load_model
from samebits.sampling import SamplingParams

ENGINE_KW = dict(max_num_seqs=32, max_num_batched_tokens=256)


class ClaimedFingerprint:
    """A dishonest deployment: runs `engine` but reports `fingerprint`."""

    def __init__(self, engine: LLMEngine, fingerprint: str) -> None:
        self._engine = engine
        self.fingerprint = fingerprint

    def __getattr__(self, name: str):
        return getattr(self._engine, name)


class NudgingRunner:
    """Moves one logit by one float32 ulp in the rows a secret key selects (~1 in 8).
    Implements `step_result.Runner` (no step fed ahead, no device digests)."""

    feeds_tokens = False
    hashes_on_device = False

    def __init__(self, runner, key: bytes) -> None:
        self.runner = runner
        self.key = key
        self.nudged: set[str] = set()

    def launch(self, sched_out, feed=None, copy_rows=True, device_digests=False) -> ReadyStep:
        assert feed is None and not device_digests
        return ReadyStep(StepLogits(self._nudged(self.runner.execute(sched_out))))

    def stats(self) -> dict[str, int]:
        return {}

    def _nudged(self, rows) -> dict:
        out = {}
        for rid, row in rows.items():
            secret = hashlib.sha256(self.key + rid.encode() + row.tobytes()).digest()
            if secret[0] < 32:
                row = row.copy()
                j = int.from_bytes(secret[1:3], "little") % row.size
                row[j] = np.nextafter(row[j], np.float32(np.inf))
                assert abs(float(row[j]) - float(rows[rid][j])) <= 1e-6 * abs(float(rows[rid][j]))
                self.nudged.add(rid)
            out[rid] = row
        return out


def bodies(count: int, max_tokens: int = 6) -> list[dict]:
    return [
        {
            "prompt": f"Entry {i % 50}: the quick brown fox {i % 11} jumps over {i * 5 % 17}.",
            "max_tokens": max_tokens - i % 3,
            "temperature": (0.0, 0.6, 1.0, 1.4)[i % 4],
            "top_p": (1.0, 0.8)[i % 2],
            "seed": 500 + i,
            "ignore_eos": i % 6 != 0,
        }
        for i in range(count)
    ]


def batched_digests(
    engine: LLMEngine, entries: list[dict]
) -> dict[int, tuple[list[int], list[str]]]:
    """All logged inputs run together on `engine` (honest ground truth)."""
    for e in entries:
        engine.add_request(
            f"truth-{e['seq']}",
            e["prompt_token_ids"],
            SamplingParams.from_dict(e["sampling_params"]),
        )
    done = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                choice = out.outputs[0]
                done[int(out.request_id.split("-")[1])] = (choice.token_ids, choice.logits_digests)
    return done


@pytest.fixture(scope="module")
def loaded(tiny_llama_dir):
    return load_model(tiny_llama_dir)


@pytest.fixture(scope="module")
def verifier(loaded):
    """The auditor's own deployment: cold (no prefix caching), built separately."""
    return LLMEngine.from_loaded(loaded, enable_prefix_caching=False)


def served_log(tmp_path, engine, count: int) -> list[dict]:
    path = tmp_path / "audit.jsonl"
    serve_into_log(engine, path, bodies(count))
    return path


def check_caught(path, verifier, affected: set[int]) -> None:
    report = verify_log(read_log(path), verifier)
    assert report.chain_issues == [] and not report.refused
    failed = {r.seq for r in report.failed_results}
    assert affected, "the attack changed nothing: the test would prove nothing"
    assert failed == affected  # 100% of affected entries caught, no false alarm elsewhere


def test_honest_log_of_200_concurrent_requests_passes(tmp_path, loaded, verifier):
    server_engine = LLMEngine.from_loaded(loaded, **ENGINE_KW, block_size=4, num_kv_blocks=48)
    path = served_log(tmp_path, server_engine, 200)
    stats = server_engine.stats()
    assert stats["num_preemptions"] > 0 and stats["prefix_cache_hits"] > 0
    report = verify_log(read_log(path), verifier)
    assert report.num_requests == 200 and len(report.results) == 200
    assert report.failed_results == [] and report.exit_code == 0
    # (d) the same log, edited / dropped / reordered, fails the chain check
    entries = load_entries(path)
    edited = [dict(e) for e in entries]
    edited[50] = {**edited[50], "output_token_ids": [t + 1 for t in edited[50]["output_token_ids"]]}
    _write(path, edited)
    assert [i.kind for i in check_chain(read_log(path).entries)] == ["edited"]
    _write(path, entries[:120] + entries[121:])
    assert [i.kind for i in check_chain(read_log(path).entries)] == ["dropped"]
    _write(path, entries[:10] + [entries[11], entries[10]] + entries[12:])
    assert "reordered" in [i.kind for i in check_chain(read_log(path).entries)]


def _write(path, entries: list[dict]) -> None:
    from samebits.audit.chain import canonical_json

    path.write_text("".join(canonical_json(e) + "\n" for e in entries))


def test_perturbed_model_is_caught(tmp_path, loaded, verifier):
    weights = dict(loaded.weights)
    name = "model.norm.weight"
    moved = weights[name].clone()
    moved[0] = torch.nextafter(moved[0], torch.tensor(float("inf")))
    assert not torch.equal(moved, weights[name])
    perturbed = LLMEngine.from_loaded(
        dataclasses.replace(loaded, weights={**weights, name: moved}), **ENGINE_KW
    )
    assert perturbed.fingerprint != verifier.fingerprint
    path = served_log(tmp_path, ClaimedFingerprint(perturbed, verifier.fingerprint), 24)
    entries = [e for e in load_entries(path) if e["type"] == "request"]
    truth = batched_digests(verifier, entries)
    affected = {e["seq"] for e in entries if truth[e["seq"]][1] != e["logits_digests"]}
    check_caught(path, verifier, affected)


def test_logit_steganography_is_caught(tmp_path, loaded, verifier):
    engine = LLMEngine.from_loaded(loaded, **ENGINE_KW)
    nudger = NudgingRunner(engine.runner, key=b"covert channel")
    engine.runner = nudger
    path = served_log(tmp_path, engine, 32)
    entries = [e for e in load_entries(path) if e["type"] == "request"]
    affected = {e["seq"] for e in entries if e["request_id"] in nudger.nudged}
    assert len(affected) < len(entries)  # some honest entries too: they must pass
    check_caught(path, verifier, affected)


def test_fast_plan_under_the_invariant_fingerprint_is_caught(tmp_path, loaded, verifier):
    fast = LLMEngine.from_loaded(loaded, kernel_plan="fast", **ENGINE_KW)
    assert fast.fingerprint != verifier.fingerprint
    path = served_log(tmp_path, ClaimedFingerprint(fast, verifier.fingerprint), 24)
    entries = [e for e in load_entries(path) if e["type"] == "request"]
    truth = batched_digests(verifier, entries)
    affected = {e["seq"] for e in entries if truth[e["seq"]][1] != e["logits_digests"]}
    check_caught(path, verifier, affected)


def test_honest_fast_log_is_refused_by_an_invariant_verifier(tmp_path, loaded, verifier):
    fast = LLMEngine.from_loaded(loaded, kernel_plan="fast", **ENGINE_KW)
    path = served_log(tmp_path, fast, 2)
    report = verify_log(read_log(path), verifier)
    assert report.refused and report.exit_code == 2 and report.results == []


def test_resealed_digest_edit_is_caught(tmp_path, loaded, verifier):
    engine = LLMEngine.from_loaded(loaded, **ENGINE_KW)
    path = served_log(tmp_path, engine, 8)
    entries = load_entries(path)
    target = next(e for e in entries if e["type"] == "request" and e["logits_digests"])
    row_digest = hashlib.sha256(b"a nudged row").hexdigest()
    target["logits_digests"][0] = row_digest
    reseal(path, entries)
    check_caught(path, verifier, {target["seq"]})
