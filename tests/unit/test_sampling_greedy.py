"""The greedy fast path of `sample` (a row no bias / mask / penalty changes: argmax of the
float32 row, no float64 copy) returns the token, and raises the errors, of the full float64
pipeline, on ordinary rows, ties, extreme values, NaN / +inf / all -inf rows and bad
histories."""

from __future__ import annotations

import numpy as np
import pytest

from samebits import sampling
from samebits.sampling import SamplingParams, sample

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, seed=1)


def _full_pipeline(row, params, position, prompt, outputs):
    """What `sample` computed before the fast path: argmax of `processed_logits`."""
    x = sampling.processed_logits(row, params, position, prompt, outputs)
    return int(np.argmax(x))


def _outcome(fn, *args):
    try:
        return fn(*args)
    except ValueError as exc:
        return ("ValueError", str(exc))


def _rows():
    rng = np.random.default_rng(0)
    for dtype in (np.float32, np.float16, np.float64):
        for _ in range(20):
            yield (rng.standard_normal(300) * 10).astype(dtype)
        tie = np.zeros(50, dtype)
        tie[[7, 30]] = 3.0
        yield tie
        extreme = np.full(40, -np.inf, dtype)
        extreme[[3, 9]] = np.finfo(dtype).max
        yield extreme
        for bad in (np.nan, np.inf):
            for at in (0, 17, 39):
                row = rng.standard_normal(40).astype(dtype)
                row[at] = bad
                yield row
        both = rng.standard_normal(40).astype(dtype)
        both[[5, 20]] = [np.inf, np.nan]
        yield both
        yield np.full(30, -np.inf, dtype)
        yield np.array([-0.0, 0.0, -0.0], dtype)


def test_fast_path_equals_the_float64_pipeline():
    for row in _rows():
        for prompt, outputs in (([1, 2], []), ([0], [5, 5, 2])):
            fast = _outcome(sample, row, GREEDY, 1, 3, prompt, outputs)
            full = _outcome(_full_pipeline, row, GREEDY, 3, prompt, outputs)
            assert fast == full, (row, fast, full)


@pytest.mark.parametrize("prompt,outputs", [([1, 999], []), ([1], [-1]), ([1.5], [])])
def test_fast_path_rejects_bad_histories_like_the_pipeline(prompt, outputs):
    row = np.zeros(100, np.float32)
    fast = _outcome(sample, row, GREEDY, 1, 0, prompt, outputs)
    assert fast == _outcome(_full_pipeline, row, GREEDY, 0, prompt, outputs)
    assert fast[0] == "ValueError"


def test_fast_path_is_taken_only_for_unchanged_rows():
    taken = sampling._row_unchanged
    assert taken(GREEDY, 0, None)
    assert not taken(SamplingParams(temperature=0.0, logit_bias={1: 1.0}), 0, None)
    assert not taken(SamplingParams(temperature=0.0, min_tokens=2, max_tokens=4), 1, None)
    assert taken(SamplingParams(temperature=0.0, min_tokens=2, max_tokens=4), 2, None)
    assert not taken(GREEDY, 0, np.ones(4, bool))
    assert not taken(SamplingParams(temperature=0.0, repetition_penalty=1.1), 0, None)
    assert not taken(SamplingParams(temperature=0.0, presence_penalty=0.5), 0, None)
    assert not taken(SamplingParams(temperature=0.0, frequency_penalty=0.5), 0, None)


def test_bad_rows_raise_like_the_pipeline():
    for bad in ([1.0, 2.0], np.zeros((2, 2), np.float32), np.zeros(0, np.float32), np.arange(4)):
        fast = _outcome(sample, bad, GREEDY, 1, 0, [1], [])
        assert fast == _outcome(_full_pipeline, bad, GREEDY, 0, [1], [])
