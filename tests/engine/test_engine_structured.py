"""Structured outputs in the engine (tiny random Llama): guided outputs parse and match their
schema / regex / choice / grammar and stop with "stop"; a guided request's token ids and
logits digests are bitwise the same alone, batched with others under chunking and
preemption, and in Ref (cold batch-of-one forward + the grammar's mask from scratch)."""

from __future__ import annotations

import json
import re

import pytest

from samebits.deployment import build_deployment
from samebits.engine.engine import LLMEngine
from samebits.engine.runner import cold_logits
from samebits.model import load_model
from samebits.outputs import logits_digest
from samebits.sampling import SamplingParams
from samebits.spec.reference import reference_view
from samebits.structured.matcher import GrammarTokenizer, grammar_step

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 4},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
        "ok": {"type": "boolean"},
        "city": {"enum": ["Paris", "Rome"]},
    },
    "required": ["name", "age", "ok", "city"],
    "additionalProperties": False,
}
COMPACT = {"json": SCHEMA, "disable_any_whitespace": True}
SPECS = [
    COMPACT,
    {"regex": "[a-z]{2,5}-[0-9]{2}"},
    {"choice": ["yes", "no", "maybe so"]},
    {"grammar": 'root ::= "(" [0-9] [0-9]? ")"'},
]


def matches_schema(value: object) -> bool:
    """SCHEMA checked by hand (jsonschema is not a dependency)."""
    if not isinstance(value, dict) or set(value) != set(SCHEMA["required"]):
        return False
    age = value["age"]
    return (
        isinstance(value["name"], str)
        and len(value["name"]) <= 4
        and isinstance(age, int)
        and not isinstance(age, bool)
        and 0 <= age <= 99
        and isinstance(value["ok"], bool)
        and value["city"] in ("Paris", "Rome")
    )


def check_output(spec: dict, text: str) -> None:
    if "json" in spec:
        assert matches_schema(json.loads(text)), text
    elif "regex" in spec:
        assert re.fullmatch(spec["regex"], text), text
    elif "choice" in spec:
        assert text in spec["choice"], text
    else:
        assert re.fullmatch(r"\([0-9]{1,2}\)", text), text


@pytest.fixture(scope="module")
def dep(tiny_llama_dir):
    return build_deployment(load_model(str(tiny_llama_dir)), "invariant")


def _run(engine: LLMEngine, jobs) -> dict:
    for rid, prompt, params in jobs:
        engine.add_request(rid, prompt, params)
    final = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.finished:
                final[out.request_id] = out.outputs[0]
    assert not engine.pop_failures()
    return final


def _guided_jobs(vocab: int) -> list[tuple[str, list[int], SamplingParams]]:
    jobs = []
    for i, spec in enumerate(SPECS):
        for temperature in (0.0, 1.0):
            params = SamplingParams(
                max_tokens=80, temperature=temperature, seed=11 + i, structured_outputs=spec
            )
            prompt = [(7 * i + 3 * k + 1) % vocab for k in range(5 + 4 * i)]
            jobs.append((f"g{i}-{temperature}", prompt, params))
    return jobs


def test_guided_outputs_match_their_grammar_and_stop(dep):
    engine = LLMEngine.from_deployment(dep)
    final = _run(engine, _guided_jobs(dep.config.vocab_size))
    for rid, choice in final.items():
        spec = SPECS[int(rid[1])]
        assert choice.finish_reason == "stop", (rid, choice.text)
        check_output(spec, choice.text)
        assert engine.tokenizer.decode(choice.token_ids) == choice.text  # no EOS appended


def test_guided_requests_are_batching_invariant_and_equal_ref(dep, monkeypatch):
    jobs = _guided_jobs(dep.config.vocab_size)
    alone = {}
    for job in jobs:
        alone.update(_run(LLMEngine.from_deployment(dep), [job]))
    # the batched run samples on the row worker threads (as large vocabularies do)
    monkeypatch.setattr("samebits.engine.row_workers.PARALLEL_MIN_ELEMENTS", 1)
    busy = LLMEngine.from_deployment(
        dep, max_num_batched_tokens=7, block_size=4, num_kv_blocks=20, max_num_seqs=6
    )
    others = [
        (f"free-{k}", [3 + k] * (9 + k), SamplingParams(max_tokens=12, seed=k, ignore_eos=True))
        for k in range(4)
    ]
    batched = _run(busy, [*others[:2], *jobs, *others[2:]])
    assert busy.scheduler.num_preemptions > 0  # the small cache forced recomputation
    view = GrammarTokenizer(dep.tokenizer, dep.config.vocab_size)
    for rid, prompt, params in jobs:
        assert batched[rid].token_ids == alone[rid].token_ids, rid
        assert batched[rid].logits_digests == alone[rid].logits_digests, rid
        grammar = lambda prefix, p=params: grammar_step(view, p.structured_outputs, prefix)  # noqa: E731
        ref = reference_view(
            lambda history: cold_logits(dep, history), prompt, params, 80,
            dep.tokenizer.eos_token_ids, grammar,
        )  # fmt: skip
        assert [r.token for r in ref.records] == alone[rid].token_ids, rid
        ref_digests = [logits_digest_of(r.logits_row) for r in ref.records]
        assert ref_digests == alone[rid].logits_digests, rid


def logits_digest_of(row_bytes: bytes) -> str:
    import numpy as np

    return logits_digest(np.frombuffer(row_bytes, dtype="<f4"))


def test_a_bad_grammar_is_refused_before_the_engine_and_nothing_is_lost(dep):
    engine = LLMEngine.from_deployment(dep)
    with pytest.raises(ValueError, match="structured_outputs.regex is invalid"):
        SamplingParams(structured_outputs={"regex": "[a-"})
    engine.add_request("ok", [1, 2, 3], SamplingParams(max_tokens=3, seed=1))
    assert list(_run(engine, [])) == ["ok"]


def test_llm_n2_choices_each_follow_the_grammar(tiny_llama_dir):
    from samebits import LLM

    llm = LLM(str(tiny_llama_dir))
    params = SamplingParams(n=3, max_tokens=80, seed=5, structured_outputs=COMPACT)
    out = llm.generate(["Describe a person as JSON:"], params)[0]
    assert len(out.outputs) == 3
    for choice in out.outputs:
        assert choice.finish_reason == "stop" and matches_schema(json.loads(choice.text))
    single = llm.generate(["Describe a person as JSON:"], SamplingParams(
        max_tokens=80, seed=5, structured_outputs=COMPACT
    ))[0].outputs[0]  # fmt: skip
    assert single.token_ids == out.outputs[0].token_ids
