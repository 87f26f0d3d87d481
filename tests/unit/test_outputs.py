"""Tests of the output types and logits digests."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from samebits.outputs import (
    CompletionOutput,
    RequestOutput,
    logits_digest,
    logits_digests,
    logits_row_bytes,
)


def _row() -> np.ndarray:
    return np.array([1.5, -0.0, 3.25e-7, -1e30, np.inf], dtype=np.float32)


def test_digest_is_sha256_of_little_endian_float32_bytes():
    row = _row()
    expected = hashlib.sha256(row.astype("<f4").tobytes()).hexdigest()
    assert logits_digest(row) == expected
    assert logits_row_bytes(row) == row.astype("<f4").tobytes()


def test_digest_ignores_byte_order_and_layout():
    row = _row()
    assert logits_digest(row.astype(">f4")) == logits_digest(row)
    strided = np.repeat(row, 2)[::2]
    assert not strided.flags.c_contiguous
    assert logits_digest(strided) == logits_digest(row)


def test_digest_sees_every_bit():
    row = _row()
    flipped = row.copy()
    flipped.view(np.uint32)[2] ^= 1  # lowest mantissa bit
    assert logits_digest(flipped) != logits_digest(row)
    signed_zero = row.copy()
    signed_zero[1] = 0.0  # +0.0 == -0.0 numerically but not bitwise
    assert logits_digest(signed_zero) != logits_digest(row)


@pytest.mark.parametrize(
    "bad",
    [
        np.zeros((2, 3), dtype=np.float32),
        np.zeros(3, dtype=np.float64),
        np.zeros(3, dtype=np.float16),
        np.zeros(3, dtype=np.int32),
        [1.0, 2.0],
    ],
)
def test_digest_rejects_wrong_shape_or_dtype(bad):
    with pytest.raises(ValueError, match="logits row"):
        logits_digest(bad)


def test_logits_digests_per_row():
    rows = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert logits_digests(rows) == [logits_digest(r) for r in rows]
    with pytest.raises(ValueError, match="2-D"):
        logits_digests(rows[0])


def _completion(**overrides) -> CompletionOutput:
    fields = dict(
        index=0,
        text="hi",
        token_ids=[5, 6],
        logprobs=None,
        finish_reason=None,
        stop_reason=None,
        seed=3,
    )
    fields.update(overrides)
    return CompletionOutput(**fields)


def test_completion_output_fields_and_finished():
    logits = np.ones((2, 4), dtype=np.float32)
    out = _completion(finish_reason="length", logits=logits, logits_digests=logits_digests(logits))
    assert out.finished
    assert not _completion().finished
    # equality goes through the digests, not the (unhashable) array
    assert out == _completion(finish_reason="length", logits_digests=logits_digests(logits))


def test_completion_output_validation():
    with pytest.raises(ValueError, match="finish_reason"):
        _completion(finish_reason="eos")
    with pytest.raises(ValueError, match="float32"):
        _completion(logits=np.ones((2, 4), dtype=np.float64))


def test_request_output_holds_completions():
    out = RequestOutput(
        request_id="r1",
        prompt=None,
        prompt_token_ids=[1, 2],
        outputs=[_completion(), _completion(index=1)],
        finished=False,
        fingerprint="abc",
    )
    assert [c.index for c in out.outputs] == [0, 1]
