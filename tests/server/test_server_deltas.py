"""The server streams engine deltas (issue 10.6): every engine output it receives holds only
the new positions, the chunks concatenate to the non-streamed response bit for bit (tokens,
text, digests, logprobs; with stop strings and n > 1), and the audit log still gets every
token and digest of each choice."""

from __future__ import annotations

import httpx
import pytest
from fake_engine import FakeEngine
from harness import RunningServer
from test_server_api import sse_events

from samebits.audit import read_log
from samebits.audit.writer import AuditLogWriter
from samebits.engine.engine import LLMEngine
from samebits.outputs import RequestOutputKind
from samebits.server.app import build_app
from samebits.server.config import ServerConfig


class SpyEngine(FakeEngine):
    """Records the output kind asked and the size of every output handed to the server."""

    def __init__(self) -> None:
        super().__init__()
        self.kinds: list[RequestOutputKind] = []
        self.sizes: list[tuple[int, int, int]] = []  # (tokens, digests, logprobs) per output

    def add_request(self, *args, **kwargs) -> None:
        super().add_request(*args, **kwargs)
        self.kinds.append(kwargs.get("output_kind", RequestOutputKind.CUMULATIVE))

    def step(self):
        outputs = super().step()
        for out in outputs:
            c = out.outputs[0]
            self.sizes.append((len(c.token_ids), len(c.logits_digests), len(c.logprobs or [])))
        return outputs


def served(url: str, body: dict) -> tuple[dict, list[dict]]:
    """(the non-streamed response, the streamed chunks) of the same body."""
    whole = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
    with httpx.stream(
        "POST", url + "/v1/completions", json={**body, "stream": True}, timeout=60
    ) as response:
        assert response.status_code == 200
        events = sse_events(response)
    assert events[-1] == "[DONE]"
    return whole, [e for e in events[:-1] if e["choices"]]


def joined(chunks: list[dict]) -> dict[int, dict]:
    """Per choice index: the concatenated text, token ids, digests and logprobs objects."""
    out: dict[int, dict] = {}
    for chunk in chunks:
        for c in chunk["choices"]:
            j = out.setdefault(
                c["index"],
                {"text": "", "token_ids": [], "digests": [], "token_logprobs": [], "tops": []},
            )
            j["text"] += c["text"]
            j["token_ids"] += c["samebits"]["token_ids"]
            j["digests"] += c["samebits"]["logits_digests"]
            if c["logprobs"] is not None:
                j["token_logprobs"] += c["logprobs"]["token_logprobs"]
                j["tops"] += c["logprobs"]["top_logprobs"]
            if c["finish_reason"] is not None:
                j["finish_reason"] = c["finish_reason"]
                j["audit"] = c["samebits"]["audit"]
    return out


def check_stream_equals_whole(whole: dict, chunks: list[dict]) -> dict[int, dict]:
    parts = joined(chunks)
    assert sorted(parts) == [c["index"] for c in whole["choices"]]
    for c in whole["choices"]:
        j = parts[c["index"]]
        assert j["text"] == c["text"]
        assert j["token_ids"] == c["samebits"]["token_ids"]
        assert j["digests"] == c["samebits"]["logits_digests"]
        assert j["finish_reason"] == c["finish_reason"]
        if c["logprobs"] is not None:
            assert j["token_logprobs"] == c["logprobs"]["token_logprobs"]
            assert j["tops"] == c["logprobs"]["top_logprobs"]
    return parts


def check_audit(log_path, parts: dict[int, dict]) -> None:
    entries = {e.entry.get("entry_hash"): e.entry for e in read_log(log_path).entries}
    for j in parts.values():
        entry = entries[j["audit"]["entry_hash"]]
        assert entry["output_token_ids"] == j["token_ids"]
        assert entry["logits_digests"] == j["digests"]
        assert entry["finish_reason"] == j["finish_reason"]


def test_the_engine_loop_asks_for_deltas_and_each_output_is_one_token(tmp_path):
    engine = SpyEngine()
    writer = AuditLogWriter(tmp_path / "audit.jsonl")
    with RunningServer(build_app(engine, ServerConfig(model_names=("fake-model",)), writer)) as s:
        body = {"prompt": "long", "max_tokens": 200, "ignore_eos": True, "seed": 3, "logprobs": 2}
        whole, chunks = served(s.url, body)
    writer.close()
    assert set(engine.kinds) == {RequestOutputKind.DELTA}
    # two requests of 200 tokens: 400 outputs of one token each, whatever the position
    assert engine.sizes == [(1, 1, 1)] * 400
    assert len(chunks) == 200
    parts = check_stream_equals_whole(whole, chunks)
    assert len(parts[0]["token_ids"]) == 200
    check_audit(tmp_path / "audit.jsonl", parts)


@pytest.fixture(scope="module")
def tiny_server(tiny_llama_dir, tmp_path_factory):
    engine = LLMEngine.from_args(
        str(tiny_llama_dir), max_num_seqs=8, max_num_batched_tokens=32, block_size=4,
        num_kv_blocks=160,
    )  # fmt: skip
    log_path = tmp_path_factory.mktemp("audit") / "audit.jsonl"
    writer = AuditLogWriter(log_path)
    config = ServerConfig(model_names=("tiny",), max_n=4)
    with RunningServer(build_app(engine, config, writer)) as server:
        server.log_path = log_path
        yield server
    writer.close()


def test_streamed_deltas_equal_the_response_with_stop_strings_and_n(tiny_server):
    base = {"prompt": "to be or not to be", "max_tokens": 40, "temperature": 0.9, "seed": 21}
    base["ignore_eos"] = True
    text = httpx.post(tiny_server.url + "/v1/completions", json=base, timeout=60).json()
    text = text["choices"][0]["text"]
    assert len(text) >= 12, text
    stops = [text[len(text) // 2 : len(text) // 2 + 3], "\x00no such stop\x00"]
    bodies = [
        {**base, "n": 3, "logprobs": 2},
        {**base, "n": 2, "stop": stops, "logprobs": 1},
        {**base, "n": 2, "stop": stops, "include_stop_str_in_output": True},
        {**base, "stop": [text[-2]]},
    ]
    stopped = 0
    for body in bodies:
        whole, chunks = served(tiny_server.url, body)
        parts = check_stream_equals_whole(whole, chunks)
        check_audit(tiny_server.log_path, parts)
        stopped += sum(c["finish_reason"] == "stop" for c in whole["choices"])
    assert stopped >= 2  # choice 0 of the stop bodies stops at the picked string


def test_chat_stream_deltas_equal_the_response(tiny_server):
    body = {
        "messages": [{"role": "user", "content": "Hello there"}],
        "max_tokens": 30, "temperature": 0.7, "seed": 5, "n": 2, "logprobs": True,
        "top_logprobs": 2,
    }  # fmt: skip
    url = tiny_server.url + "/v1/chat/completions"
    whole = httpx.post(url, json=body, timeout=60).json()
    with httpx.stream("POST", url, json={**body, "stream": True}, timeout=60) as response:
        events = [e for e in sse_events(response)[:-1] if e["choices"]]
    for c in whole["choices"]:
        mine = [  # the chunks after the opening role chunk
            e["choices"][0]
            for e in events
            if e["choices"][0]["index"] == c["index"] and "samebits" in e["choices"][0]
        ]
        content = "".join(d["delta"].get("content", "") for d in mine)
        assert content == c["message"]["content"]
        tokens = [t for d in mine for t in d["samebits"]["token_ids"]]
        assert tokens == c["samebits"]["token_ids"]
        digests = [x for d in mine for x in d["samebits"]["logits_digests"]]
        assert digests == c["samebits"]["logits_digests"]
        lps = [x for d in mine if d["logprobs"] for x in d["logprobs"]["content"]]
        assert lps == c["logprobs"]["content"]
