"""docs/server.md's parameter table is what the server does: every refused row is refused with
the documented message (and accepted at its harmless values), every supported row is a field
of the request model, every ignored row is accepted; the table and `protocol.py` list the same
parameters."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from samebits.server.protocol import (
    IGNORED,
    REFUSED,
    ChatCompletionRequest,
    CompletionRequest,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "server.md"
ROUTES = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}
BASE = {
    "completions": {"prompt": "hi", "max_tokens": 1},
    "chat": {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1},
}
MODELS = {"completions": CompletionRequest, "chat": ChatCompletionRequest}


def doc_rows() -> dict[tuple[str, str], tuple[str, str]]:
    """{(parameter, endpoint kind): (status, last column)} of the '## Parameters' table."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Parameters", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        names, endpoints, status, last = cells
        kinds = ("completions", "chat") if endpoints == "both" else (endpoints,)
        for name in re.findall(r"`([a-z_]+)`", names):
            for kind in kinds:
                assert (name, kind) not in rows, f"{name} ({kind}) listed twice"
                rows[name, kind] = (status, last)
    return rows


ROWS = doc_rows()
CASES = [(r, kind) for r in REFUSED for kind in r.endpoints]


def listed(prefix: str) -> set[tuple[str, str]]:
    return {key for key, (status, _) in ROWS.items() if status.startswith(prefix)}


def test_the_table_and_the_code_list_the_same_parameters():
    assert listed("refused") == {(r.name, kind) for r in REFUSED for kind in r.endpoints}
    assert listed("ignored") == {(n, kind) for n, kinds in IGNORED.items() for kind in kinds}
    supported = listed("supported")
    for kind, model in MODELS.items():
        assert {n for n, k in supported if k == kind} == set(model.model_fields), kind
    for r in REFUSED:
        for kind in r.endpoints:
            assert ROWS[r.name, kind][1] == f"`{r.message}`", r.name


@pytest.mark.parametrize(("refused", "kind"), CASES, ids=[f"{r.name}-{k}" for r, k in CASES])
def test_refused_parameters_get_the_documented_400(fake_server, refused, kind):
    body = {**BASE[kind], refused.name: refused.example}
    response = httpx.post(fake_server.url + ROUTES[kind], json=body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == refused.name
    assert error["type"] == "invalid_request_error"
    assert f"`{error['message']}`" == ROWS[refused.name, kind][1]


@pytest.mark.parametrize(("refused", "kind"), CASES, ids=[f"{r.name}-{k}" for r, k in CASES])
def test_harmless_values_and_null_are_accepted(fake_server, refused, kind):
    for value in (None, *refused.harmless):
        body = {**BASE[kind], refused.name: value}
        response = httpx.post(fake_server.url + ROUTES[kind], json=body)
        assert response.status_code == 200, (value, response.text)


def test_refused_on_one_endpoint_is_unknown_on_the_other(fake_server):
    """`suffix` is a completions parameter: a chat body carrying it is not refused."""
    body = {**BASE["chat"], "suffix": "z", "prompt_embeds": "AAAA"}
    assert httpx.post(fake_server.url + ROUTES["chat"], json=body).status_code == 200


@pytest.mark.parametrize("kind", ["completions", "chat"])
def test_ignored_parameters_are_accepted(fake_server, kind):
    extra = {name: {"k": "v"} for name, kinds in IGNORED.items() if kind in kinds}
    response = httpx.post(fake_server.url + ROUTES[kind], json={**BASE[kind], **extra})
    assert response.status_code == 200, response.text


def test_add_special_tokens_and_add_generation_prompt(fake_server):
    url = fake_server.url

    def prompt_ids(path: str, body: dict) -> list[int]:
        response = httpx.post(url + path, json=body)
        assert response.status_code == 200, response.text
        return response.json()["choices"][0]["samebits"]["prompt_token_ids"]

    with_bos = prompt_ids(ROUTES["completions"], BASE["completions"])
    without = prompt_ids(
        ROUTES["completions"], {**BASE["completions"], "add_special_tokens": False}
    )
    assert with_bos[1:] == without and len(with_bos) == len(without) + 1
    chat = prompt_ids(ROUTES["chat"], BASE["chat"])
    no_turn = prompt_ids(ROUTES["chat"], {**BASE["chat"], "add_generation_prompt": False})
    assert len(no_turn) < len(chat)


@pytest.mark.parametrize(
    ("extra", "param", "message"),
    [
        ({"n": 9}, "n", "'n' is 9, the limit is 4"),
        ({"min_tokens": 3}, "min_tokens", "'min_tokens' is 3, the limit is 1 (max_tokens)"),
        ({"prompt": ["a"] * 65}, "prompt", "the number of prompts in 'prompt' is 65, the limit"),
        ({"prompt": [1, 999]}, "prompt", "prompt token id 999 is out of range [0, 258)"),
        ({"logit_bias": {"300": 1}}, "logit_bias", "'logit_bias' token id 300 is out of range"),
        ({"stop_token_ids": [7, 258]}, "stop_token_ids", "'stop_token_ids' id 258 is out of"),
    ],
)
def test_limits_and_token_ranges_share_one_check(fake_server, extra, param, message):
    body = {**BASE["completions"], **extra}
    response = httpx.post(fake_server.url + ROUTES["completions"], json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and error["message"].startswith(message), error
