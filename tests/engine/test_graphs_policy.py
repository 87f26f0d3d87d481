"""Which steps replay a decode graph and which bucket they pad to (pure Python)."""

from __future__ import annotations

import pytest

from samebits.engine.scheduler import ScheduledRequest
from samebits.graphs.policy import (
    DEFAULT_BUCKETS,
    NOT_DECODE,
    TOO_LARGE,
    GraphConfig,
    decode_buckets,
    graph_bucket,
    graph_config,
)


def _req(n_tokens: int = 1, all_rows: bool = False, sample: bool = True) -> ScheduledRequest:
    return ScheduledRequest("r", (7,) * n_tokens, 5, (0,), sample, all_rows)


def test_buckets_are_capped_by_max_num_seqs():
    assert decode_buckets(256) == DEFAULT_BUCKETS
    assert decode_buckets(32) == (1, 2, 4, 8, 16, 24, 32)
    assert decode_buckets(100) == (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 100)
    assert decode_buckets(1) == (1,)
    assert decode_buckets(1000) == DEFAULT_BUCKETS  # above 256: those steps run eagerly


def test_bucket_is_the_smallest_that_holds_the_step():
    buckets = decode_buckets(256)
    for n, want in [(1, 1), (3, 4), (5, 8), (17, 24), (64, 64), (65, 96), (100, 128), (256, 256)]:
        assert graph_bucket([_req()] * n, buckets) == (want, "")


def test_fallbacks_name_their_reason():
    buckets = (1, 2, 4)
    assert graph_bucket([_req()] * 5, buckets) == (None, TOO_LARGE)
    assert graph_bucket([_req(), _req(n_tokens=3)], buckets) == (None, NOT_DECODE)
    assert graph_bucket([_req(all_rows=True)], buckets) == (None, NOT_DECODE)
    assert graph_bucket([], buckets) == (None, NOT_DECODE)
    # a one-token chunk that does not sample has the decode shape: it replays (row dropped)
    assert graph_bucket([_req(sample=False), _req()], buckets) == (2, "")


def test_config_switch_and_validation():
    assert graph_config("cuda", False, 64).enabled
    assert graph_config("cuda", False, 64).buckets[-1] == 64
    assert not graph_config("cuda", True, 64).enabled  # enforce_eager
    assert not graph_config("cpu", False, 64).enabled
    assert "off" in GraphConfig().describe()
    assert "[1, 2, 4]" in GraphConfig(True, (1, 2, 4)).describe()
    for bad in [(), (2, 4), (1, 4, 4), (1, 8, 4)]:
        with pytest.raises(ValueError):
            GraphConfig(True, bad)
