"""Tests of the executable spec: the determinism predicates and Ref."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from samebits.outputs import logits_row_bytes
from samebits.sampling import SamplingParams, sample
from samebits.spec import (
    OutputRecord,
    RequestInput,
    RequestView,
    deterministic,
    first_disagreement,
    first_mismatch,
    is_reference_prefix,
    reference_view,
    request_input,
    view_from_output,
    views_agree,
)

VOCAB = 32
EOS = 7
PARAMS = SamplingParams(temperature=0.9, top_p=0.95, seed=2024)


def _row(*values: float) -> bytes:
    return np.array(values, dtype="<f4").tobytes()


def _input(prompt=(1, 2), seed=1) -> RequestInput:
    return request_input(prompt, SamplingParams(seed=seed))


def _view(records, prompt=(1, 2), seed=1) -> RequestView:
    return RequestView(_input(prompt, seed), tuple(OutputRecord(_row(*r), t) for r, t in records))


A = [((0.5, 1.0), 1), ((0.25, 2.0), 0), ((1.0, 1.0), 1)]


def test_views_agree_cases():
    full = _view(A)
    assert views_agree(full, _view(A))
    assert views_agree(full, _view(A[:1]))  # one stopped earlier
    assert views_agree(_view([]), full)
    assert not views_agree(full, _view(A[:1] + [((0.25, 2.0), 1)]))  # token differs
    assert not views_agree(full, _view(A[:1] + [((0.25, 2.0000002), 0)]))  # one ulp
    assert not views_agree(full, _view([((0.5, 1.0), 0)]))  # first token differs
    assert views_agree(full, _view([((9.0, 9.0), 0)], seed=2))  # different inputs: no claim
    assert views_agree(full, _view([((9.0, 9.0), 0)], prompt=(1, 3)))


def test_signed_zero_counts_as_a_difference():
    assert not views_agree(_view([((0.0, 1.0), 1)]), _view([((-0.0, 1.0), 1)]))


def test_deterministic_within_and_across_executions():
    other = _view([((3.0, 3.0), 1)], seed=5)
    assert deterministic([_view(A), other], [_view(A[:2]), other])
    assert not deterministic([_view(A), _view([((0.5, 1.0), 0)])], [])  # within one
    assert not deterministic([_view(A)], [other, _view([((0.5, 1.5), 1)])])  # across
    assert deterministic([], [])


def test_is_reference_prefix_cases():
    reference = _view(A)
    assert is_reference_prefix(_view(A[:2]), reference)
    assert is_reference_prefix(_view(A), reference)
    assert is_reference_prefix(_view([]), reference)
    assert not is_reference_prefix(_view(A + A[:1]), reference)  # longer than Ref
    assert not is_reference_prefix(_view(A[:2], seed=3), reference)  # other input
    assert not is_reference_prefix(_view([A[0], ((0.25, 2.0), 1)]), reference)


def test_first_mismatch_descriptions():
    reference = _view(A)
    assert first_mismatch(_view(A[:2]), reference) is None
    token = first_mismatch(_view([A[0], ((0.25, 2.0), 1)]), reference)
    assert token == "position 1: token 1 != 0"
    row = first_mismatch(_view([A[0], A[1], ((1.0, 1.5), 1)]), reference)
    assert row.startswith("position 2: logits rows differ in 1 of 2 entries; first at id 1")
    assert first_mismatch(_view(A, seed=3), reference).startswith("inputs differ")


def test_first_disagreement_names_the_pair():
    bad = _view([((0.5, 1.0), 0)])
    assert first_disagreement([_view(A)], [_view(A[:1])]) is None
    message = first_disagreement([_view(A), _view(A, seed=9)], [bad])
    assert message.startswith("views 0 and 2 (of 3): position 0: token 1 != 0")


def test_request_input_and_view_from_output():
    params = SamplingParams(temperature=0.5, seed=11, max_tokens=3)
    logits = np.arange(6, dtype=np.float32).reshape(2, 3)
    view = view_from_output([4, 5], params, [2, 0], logits)
    assert view.input == RequestInput((4, 5), params.sampler_state())
    assert view.records == (
        OutputRecord(logits[0].astype("<f4").tobytes(), 2),
        OutputRecord(logits[1].astype("<f4").tobytes(), 0),
    )
    # an output that stopped earlier under another max_tokens has the same input
    assert view.input == request_input((4, 5), SamplingParams(temperature=0.5, seed=11))
    with pytest.raises(ValueError, match="one row per token"):
        view_from_output([4], params, [1], logits)
    with pytest.raises(ValueError, match="seed"):
        view_from_output([4], SamplingParams(), [1, 2], logits)


# ---------------------------------------------------------------------------------------------
# Ref with a toy model


class ToyModel:
    """A pure toy 'model': the row is a function of the whole history; EOS wins late."""

    def __init__(self, eos_after: int | None = None, prompt_len: int = 0) -> None:
        self.calls: list[tuple[int, ...]] = []
        self.eos_after = eos_after
        self.prompt_len = prompt_len

    def __call__(self, history) -> np.ndarray:
        self.calls.append(tuple(history))
        row = np.random.default_rng([len(history), *history]).standard_normal(VOCAB)
        row[EOS] = -30.0
        if self.eos_after is not None and len(history) - self.prompt_len >= self.eos_after:
            row[EOS] = 60.0
        return row.astype(np.float32)


PROMPT = (3, 1, 4, 1, 5)


def test_reference_view_recomputes_the_full_history_each_position():
    model = ToyModel()
    view = reference_view(model, PROMPT, PARAMS, n=6)
    tokens = [r.token for r in view.records]
    assert len(tokens) == 6
    assert model.calls == [PROMPT + tuple(tokens[:i]) for i in range(6)]
    for i, record in enumerate(view.records):
        row = ToyModel()(PROMPT + tuple(tokens[:i]))
        assert record.logits_row == logits_row_bytes(row)
        assert record.token == sample(row, PARAMS, PARAMS.seed, i, PROMPT, tokens[:i])
    assert view.input == request_input(PROMPT, PARAMS)


def test_reference_view_is_reproducible_and_seed_sensitive():
    first = reference_view(ToyModel(), PROMPT, PARAMS, n=8)
    assert first == reference_view(ToyModel(), PROMPT, PARAMS, n=8)
    assert is_reference_prefix(reference_view(ToyModel(), PROMPT, PARAMS, n=3), first)
    other = reference_view(ToyModel(), PROMPT, PARAMS.with_seed(7), n=8)
    assert [r.token for r in other.records] != [r.token for r in first.records]


def test_reference_view_stops_on_eos_and_stop_token_ids():
    model = ToyModel(eos_after=2, prompt_len=len(PROMPT))
    stopped = reference_view(model, PROMPT, PARAMS, n=10, eos_token_ids=(EOS,))
    assert [r.token for r in stopped.records][-1] == EOS and len(stopped.records) == 3
    ignoring = dataclasses.replace(PARAMS, ignore_eos=True)
    kept_going = reference_view(model, PROMPT, ignoring, n=10, eos_token_ids=(EOS,))
    assert len(kept_going.records) == 10
    assert is_reference_prefix(stopped, kept_going)  # ignore_eos is not a sampler field
    by_stop_id = dataclasses.replace(PARAMS, stop_token_ids=[EOS])
    assert len(reference_view(model, PROMPT, by_stop_id, n=10).records) == 3


def test_reference_view_rejects_bad_arguments():
    with pytest.raises(ValueError, match="seed"):
        reference_view(ToyModel(), PROMPT, SamplingParams(), n=2)
    with pytest.raises(ValueError, match="float32"):
        reference_view(lambda h: np.zeros(VOCAB), PROMPT, PARAMS, n=2)


def _engine_like(model, requests, batch_noise: bool) -> list[RequestView]:
    """Round-robin decoding of several requests; `batch_noise` perturbs rows in full batches."""
    histories = {rid: [] for rid in requests}
    rows: dict[str, list[np.ndarray]] = {rid: [] for rid in requests}
    for position in range(4):
        for rid, (prompt, params) in requests.items():
            row = model(tuple(prompt) + tuple(histories[rid]))
            if batch_noise and len(requests) > 1:
                row = np.nextafter(row, np.float32(np.inf))
            token = sample(row, params, params.seed, position, prompt, histories[rid])
            rows[rid].append(row)
            histories[rid].append(token)
    return [
        view_from_output(prompt, params, histories[rid], np.stack(rows[rid]))
        for rid, (prompt, params) in requests.items()
    ]


def test_predicates_catch_a_batch_dependent_engine():
    solo = {"a": (PROMPT, PARAMS)}
    crowd = {"a": (PROMPT, PARAMS), "b": ((2, 7), PARAMS.with_seed(5))}
    reference = reference_view(ToyModel(), PROMPT, PARAMS, n=4)
    honest = _engine_like(ToyModel(), crowd, batch_noise=False)
    assert deterministic(_engine_like(ToyModel(), solo, batch_noise=False), honest)
    assert is_reference_prefix(honest[0], reference)
    drifting = _engine_like(ToyModel(), crowd, batch_noise=True)
    assert not deterministic(_engine_like(ToyModel(), solo, batch_noise=False), drifting)
    assert not is_reference_prefix(drifting[0], reference)
    assert "position 0: logits rows differ" in first_mismatch(drifting[0], reference)
