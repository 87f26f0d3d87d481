"""The audit log of guided requests (tiny random Llama, real server): the grammar spec is
logged with the sampling parameters, `samebits verify` rebuilds the matcher from it and the
honest log passes; a log whose grammar was edited (chain re-sealed) fails."""

from __future__ import annotations

import json

import pytest
from logtools import load_entries, serve_into_log, tamper

from samebits.audit import read_log
from samebits.audit.verify import verify_log
from samebits.engine.engine import LLMEngine
from samebits.structured import StructuredOutputsParams

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}, "b": {"type": "boolean"}},
    "required": ["n", "b"],
    "additionalProperties": False,
}
BODIES = [
    {"prompt": "json please", "max_tokens": 40, "seed": 1, "temperature": 0.9,
     "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}},
     "guided_whitespace_pattern": ""},
    {"prompt": "pick one", "max_tokens": 20, "seed": 2, "guided_choice": ["alpha", "beta"]},
    {"prompt": "code", "max_tokens": 20, "seed": 3, "n": 2, "guided_regex": "[a-z]{3}-[0-9]"},
    {"prompt": "free text", "max_tokens": 6, "seed": 4},
]  # fmt: skip


@pytest.fixture(scope="module")
def guided_log(tiny_llama_dir, tmp_path_factory):
    engine = LLMEngine.from_args(str(tiny_llama_dir))
    path = tmp_path_factory.mktemp("guided") / "audit.jsonl"
    serve_into_log(engine, path, BODIES)
    return engine, path


def test_the_grammar_is_logged_and_the_honest_log_verifies(guided_log):
    engine, path = guided_log
    requests = [e for e in load_entries(path) if e["type"] == "request"]
    specs = [e["sampling_params"]["structured_outputs"] for e in requests]
    assert sum(spec is not None for spec in specs) == 4 and specs.count(None) == 1
    choice = next(s for s in specs if s and "choice" in s)
    assert StructuredOutputsParams.from_dict(choice) == StructuredOutputsParams(
        choice=("alpha", "beta")
    )
    for entry in requests:
        if entry["sampling_params"]["structured_outputs"]:
            assert entry["finish_reason"] == "stop", entry
    report = verify_log(read_log(path), engine)
    assert report.exit_code == 0 and len(report.results) == 5
    assert all(r.ok for r in report.results)


def test_an_edited_grammar_fails_verification(guided_log, tmp_path):
    engine, honest = guided_log
    path = tmp_path / "audit.jsonl"
    path.write_bytes(honest.read_bytes())

    def swap_choices(seq: int, entry: dict) -> bool:
        spec = entry["sampling_params"]["structured_outputs"]
        if not spec or "choice" not in spec:
            return False
        spec["choice"] = ["gamma", "delta"]
        return True

    edited = tamper(path, swap_choices)
    report = verify_log(read_log(path), engine)
    assert report.chain_issues == [] and len(edited) == 1
    assert [r.seq for r in report.failed_results] == edited
    assert report.exit_code == 1
    assert json.loads(path.read_text().splitlines()[edited[0]])  # still a well-formed entry
