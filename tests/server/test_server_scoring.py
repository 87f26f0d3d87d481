"""Scoring through the OpenAI API on the tiny random llama: `/v1/completions` with `echo` and
`logprobs` (also `max_tokens=0`), `logit_bias`, `min_tokens`, their errors, and the audit
replay of such requests.

Logprobs are compared as Python floats parsed from JSON (`json` writes the shortest repr, so
a float64 makes the round trip exactly): equality of those floats is bitwise equality except
for -0.0 / NaN, which a log-softmax value here is never (finite, and a 0.0 comes out as +0.0).
"""

from __future__ import annotations

import asyncio

import httpx
import openai
import pytest
from harness import RunningServer

from samebits.audit import AuditLogWriter, read_log
from samebits.audit.chain import GENESIS_HASH, canonical_json, seal_entry
from samebits.audit.verify import verify_log
from samebits.engine.engine import LLMEngine
from samebits.engine.runner import cold_logits
from samebits.sampling import compute_logprobs
from samebits.server.app import build_app
from samebits.server.config import ServerConfig

K = 3
PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Scoring a prompt: every token after the first gets its logprob.",
    "a",
    "Once upon a time there was a model whose logits never changed under batching.",
]


@pytest.fixture(scope="module")
def scoring_server(tiny_llama_dir, tmp_path_factory):
    engine = LLMEngine.from_args(
        str(tiny_llama_dir), max_num_seqs=16, max_num_batched_tokens=24, block_size=4,
        num_kv_blocks=128,
    )  # fmt: skip
    log_path = tmp_path_factory.mktemp("scoring") / "audit.jsonl"
    writer = AuditLogWriter(log_path)
    config = ServerConfig(model_names=("tiny",))
    with RunningServer(build_app(engine, config, writer)) as server:
        server.engine = engine
        server.log_path = log_path
        yield server
    writer.close()


def client_for(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0)


def expected_prompt_logprobs(engine, ids: list[int]) -> list[dict[int, float] | None]:
    rows = cold_logits(engine.deployment, ids, all_rows=True)
    return [None] + [compute_logprobs(rows[p - 1], ids[p], K) for p in range(1, len(ids))]


def post(server, body: dict) -> httpx.Response:
    return httpx.post(server.url + "/v1/completions", json={"model": "tiny", **body}, timeout=120)


def test_echo_logprobs_max_tokens_0_scores_the_prompt(scoring_server):
    engine = scoring_server.engine
    tok = engine.tokenizer
    client = client_for(scoring_server)
    prompt = PROMPTS[1]
    ids = tok.encode(prompt, add_special_tokens=True)
    out = client.completions.create(
        model="tiny", prompt=prompt, echo=True, logprobs=K, max_tokens=0, seed=1
    )
    choice = out.choices[0]
    assert choice.text == prompt and choice.finish_reason == "length"
    assert out.usage.completion_tokens == 0 and out.usage.prompt_tokens == len(ids)
    lp = choice.logprobs
    assert lp.tokens == [tok.token_to_str(t) for t in ids]
    want = expected_prompt_logprobs(engine, ids)
    assert lp.token_logprobs[0] is None and lp.top_logprobs[0] is None
    assert lp.token_logprobs[1:] == [want[p][ids[p]] for p in range(1, len(ids))]
    for p in range(1, len(ids)):
        top = sorted(want[p].items(), key=lambda item: (-item[1], item[0]))[:K]
        assert lp.top_logprobs[p] == {tok.token_to_str(t): v for t, v in top}
    offsets = [0]
    for text in lp.tokens[:-1]:
        offsets.append(offsets[-1] + len(text))
    assert lp.text_offset == offsets
    assert choice.model_extra["samebits"]["token_ids"] == []


def test_echo_with_generation_puts_the_prompt_first(scoring_server):
    tok = scoring_server.engine.tokenizer
    client = client_for(scoring_server)
    prompt = PROMPTS[0]
    ids = tok.encode(prompt, add_special_tokens=True)
    plain = client.completions.create(model="tiny", prompt=prompt, max_tokens=4, logprobs=2, seed=5)
    echoed = client.completions.create(
        model="tiny", prompt=prompt, max_tokens=4, logprobs=2, seed=5, echo=True
    )
    a, b = plain.choices[0], echoed.choices[0]
    assert b.text == prompt + a.text
    assert b.logprobs.tokens == [tok.token_to_str(t) for t in ids] + a.logprobs.tokens
    assert b.logprobs.token_logprobs[len(ids) :] == a.logprobs.token_logprobs
    assert b.logprobs.top_logprobs[len(ids) :] == a.logprobs.top_logprobs
    assert b.logprobs.text_offset[len(ids) :] == [len(prompt) + o for o in a.logprobs.text_offset]
    assert b.model_extra["samebits"]["token_ids"] == a.model_extra["samebits"]["token_ids"]
    # echo without logprobs: text only; token id prompts echo their decoded text
    only = client.completions.create(model="tiny", prompt=ids, max_tokens=2, seed=5, echo=True)
    assert only.choices[0].text.startswith(tok.decode(ids, skip_special_tokens=False))
    assert only.choices[0].logprobs is None


def test_streamed_echo_equals_the_whole_response(scoring_server):
    client = client_for(scoring_server)
    kw = dict(model="tiny", prompt=PROMPTS[3], max_tokens=5, logprobs=K, seed=8, echo=True)
    whole = client.completions.create(**kw).choices[0]
    chunks = [c for c in client.completions.create(stream=True, **kw) if c.choices]
    assert "".join(c.choices[0].text for c in chunks) == whole.text
    n = len(scoring_server.engine.tokenizer.encode(PROMPTS[3], add_special_tokens=True))
    for field in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
        joined = [
            v
            for c in chunks
            if c.choices[0].logprobs
            for v in getattr(c.choices[0].logprobs, field)
        ]
        if field == "text_offset":  # a stream's generated offsets follow the streamed text
            joined, want = joined[:n], whole.logprobs.text_offset[:n]
        else:
            want = getattr(whole.logprobs, field)
        assert joined == want, field
    scored = [c for c in client.completions.create(stream=True, **{**kw, "max_tokens": 0})]
    assert "".join(c.choices[0].text for c in scored if c.choices) == PROMPTS[3]
    assert scored[-1].choices[0].finish_reason == "length"


def test_scoring_is_bitwise_the_same_under_concurrency(scoring_server):
    """Scoring calls mixed with generating calls, concurrently, equal the same calls one by
    one (budget 24 tokens per step: prompts are chunked differently in the two runs)."""
    bodies = []
    for i in range(24):
        prompt = PROMPTS[i % len(PROMPTS)] + f" variant {i // len(PROMPTS)}"
        if i % 3 == 2:
            bodies.append({"prompt": prompt, "max_tokens": 12, "seed": i, "ignore_eos": True})
        else:
            bodies.append(
                {"prompt": prompt, "echo": True, "logprobs": K, "max_tokens": i % 2, "seed": i}
            )

    async def send_all() -> list[dict]:
        async with httpx.AsyncClient(base_url=scoring_server.url, timeout=600) as client:
            calls = [client.post("/v1/completions", json={"model": "tiny", **b}) for b in bodies]
            return [r.json() for r in await asyncio.gather(*calls)]

    steps = scoring_server.engine.num_steps
    concurrent = asyncio.run(send_all())
    assert scoring_server.engine.num_steps - steps < 24 * 3  # they really shared steps
    alone = [post(scoring_server, b).json() for b in bodies]
    for i, (a, b) in enumerate(zip(concurrent, alone, strict=True)):
        assert a["choices"][0]["logprobs"] == b["choices"][0]["logprobs"], i
        assert a["choices"][0]["text"] == b["choices"][0]["text"], i
        assert a["choices"][0]["samebits"] == {
            **b["choices"][0]["samebits"],
            "audit": a["choices"][0]["samebits"]["audit"],
        }, i
    engine = scoring_server.engine
    for body, res in zip(bodies, concurrent, strict=True):
        if not body.get("echo"):
            continue
        ids = res["choices"][0]["samebits"]["prompt_token_ids"]
        want = expected_prompt_logprobs(engine, ids)
        got = res["choices"][0]["logprobs"]["token_logprobs"][: len(ids)]
        assert got == [None] + [want[p][ids[p]] for p in range(1, len(ids))]


def test_logit_bias_forces_a_token_on_both_endpoints(scoring_server):
    client = client_for(scoring_server)
    target = 42
    out = client.completions.create(
        model="tiny", prompt="hello", max_tokens=4, seed=2, temperature=1.0,
        logit_bias={str(target): 100},
    )  # fmt: skip
    assert out.choices[0].model_extra["samebits"]["token_ids"] == [target] * 4
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=3, seed=2,
        logit_bias={str(target): 100}, logprobs=True, top_logprobs=1,
    )  # fmt: skip
    assert chat.choices[0].model_extra["samebits"]["token_ids"] == [target] * 3


def test_min_tokens_holds_eos_back(scoring_server):
    eos = scoring_server.engine.tokenizer.eos_token_ids[0]
    body = {"prompt": "hello", "max_tokens": 8, "temperature": 0, "logit_bias": {str(eos): 100}}
    first = post(scoring_server, body).json()["choices"][0]
    assert first["samebits"]["token_ids"] == [eos] and first["finish_reason"] == "stop"
    held = post(scoring_server, {**body, "min_tokens": 3}).json()["choices"][0]
    tokens = held["samebits"]["token_ids"]
    assert len(tokens) == 4 and eos not in tokens[:3] and tokens[3] == eos
    assert held["finish_reason"] == "stop"


@pytest.mark.parametrize(
    "extra,param,needle",
    [
        ({"logit_bias": {"abc": 1}}, "logit_bias", "token ids"),
        ({"logit_bias": {"-3": 1}}, "logit_bias", "token ids"),
        ({"logit_bias": {"99999999": 1}}, "logit_bias", "out of range"),
        ({"logit_bias": {"5": 100.5}}, "logit_bias", "[-100, 100]"),
        ({"logit_bias": {"5": -101}}, "logit_bias", "[-100, 100]"),
        ({"logit_bias": {"5": "1"}}, "logit_bias", "[-100, 100]"),
        ({"logit_bias": {"5": True}}, "logit_bias", "[-100, 100]"),
        ({"logit_bias": [1, 2]}, "logit_bias", "logit_bias"),
        ({"min_tokens": 5, "max_tokens": 2}, "min_tokens", "min_tokens"),
        ({"min_tokens": -1}, "min_tokens", "min_tokens"),
        ({"max_tokens": 0}, "max_tokens", "echo"),
        ({"max_tokens": -1, "echo": True}, "max_tokens", "max_tokens"),
        ({"echo": True, "logprobs": 21}, "logprobs", "logprobs"),
        ({"prompt_logprobs": 2}, "prompt_logprobs", "echo"),
    ],
)
def test_bad_scoring_fields_are_400_with_openai_errors(scoring_server, extra, param, needle):
    response = post(scoring_server, {"prompt": "hi", **extra})
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and needle in error["message"]
    assert error["type"] == "invalid_request_error"


def test_openai_client_raises_bad_request_for_a_bad_bias(scoring_server):
    client = client_for(scoring_server)
    with pytest.raises(openai.BadRequestError) as info:
        client.completions.create(model="tiny", prompt="hi", logit_bias={"7": 250})
    assert info.value.status_code == 400 and "logit_bias" in str(info.value)


def test_audit_replays_bias_min_tokens_and_scoring_requests(scoring_server, tmp_path):
    eos = scoring_server.engine.tokenizer.eos_token_ids[0]
    post(scoring_server, {"prompt": "audit me", "max_tokens": 5, "seed": 11,
                          "logit_bias": {"9": 7.5, str(eos): 100}, "min_tokens": 2})  # fmt: skip
    post(scoring_server, {"prompt": PROMPTS[2], "echo": True, "logprobs": 2, "max_tokens": 0})
    entries = [e.entry for e in read_log(scoring_server.log_path).entries]
    biased = [e for e in entries if e.get("sampling_params", {}).get("logit_bias")]
    assert any(e["sampling_params"]["min_tokens"] == 2 for e in biased)
    scored = entries[-1]  # max_tokens 0: logged as the engine ran it, one token
    assert scored["sampling_params"]["prompt_logprobs"] == 2
    assert scored["sampling_params"]["max_tokens"] == 1 and len(scored["output_token_ids"]) == 1
    verifier = LLMEngine.from_deployment(
        scoring_server.engine.deployment, enable_prefix_caching=False
    )
    report = verify_log(read_log(scoring_server.log_path), verifier)
    assert report.exit_code == 0, [r.message for r in report.failed_results]
    assert len(report.results) == report.num_requests > 0
    # the same log with the bias dropped from that entry (chain re-sealed) fails its replay
    target = next(e for e in biased if e["sampling_params"]["min_tokens"] == 2)
    edited, prev = [], GENESIS_HASH
    for entry in entries:
        record = {k: v for k, v in entry.items() if k not in ("seq", "prev_hash", "entry_hash")}
        if entry["seq"] == target["seq"]:
            record["sampling_params"] = {**record["sampling_params"], "logit_bias": []}
        sealed = seal_entry(record, entry["seq"], prev)
        prev = sealed["entry_hash"]
        edited.append(canonical_json(sealed) + "\n")
    forged = tmp_path / "forged.jsonl"
    forged.write_text("".join(edited))
    report = verify_log(read_log(forged), verifier)
    assert report.chain_issues == []
    assert [r.seq for r in report.failed_results] == [target["seq"]]
