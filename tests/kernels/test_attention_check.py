"""The attention certificates' metadata precondition, checked at run time
(`kernels.attention_check`): the metadata the host builds passes; each broken fact is named."""

from __future__ import annotations

import numpy as np
import pytest

from samebits.kernels.attention_check import (
    POS_MAX,
    MetadataError,
    check_metadata,
    check_positions,
)


def _built(lens: list[int], tpt: int):
    """The metadata `attention_meta._programs` builds for requests of ``lens`` tokens."""
    from samebits.kernels.triton.attention_meta import _programs

    qsl = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    req, row0 = _programs(qsl, tpt)
    pos = np.concatenate([np.arange(n) for n in lens] or [[]]).astype(np.int32)
    tables = np.zeros((len(lens), 8), np.int32)
    return pos, qsl, tables, req, row0


def test_the_hosts_own_metadata_passes():
    pytest.importorskip("triton")
    for lens, tpt in (([5, 1, 17], 4), ([1, 1, 1], 1), ([64], 16), ([], 4)):
        check_metadata(*_built(lens, tpt), tpt, 16)


@pytest.mark.parametrize(
    "broken, needle",
    [
        (lambda m: (m[0], m[1], m[2], m[3], m[4] + 1), "first row is not a token"),
        (lambda m: (m[0], m[1], m[2], m[3], np.where(m[4] == 4, 0, m[4])), "exactly once"),
        (lambda m: (m[0], m[1], m[2], np.minimum(m[3] + 1, 2), m[4]), "own request"),
        (lambda m: (m[0] - 1, *m[1:]), "positions must lie"),
        (lambda m: (m[0] + 200, *m[1:]), "positions must lie"),
        (lambda m: (m[0], m[1][:-1], m[2][:-1], m[3], m[4]), "query_start_loc"),
    ],
)
def test_each_broken_fact_is_refused(broken, needle):
    pytest.importorskip("triton")
    meta = broken(_built([5, 1, 17], 4))
    with pytest.raises(MetadataError, match=needle):
        check_metadata(*meta, 4, 16)


def test_positions_past_the_int32_bound_are_refused():
    check_positions(np.array([0, POS_MAX - 1]), POS_MAX + 16)
    with pytest.raises(MetadataError, match="int32 bound"):
        check_positions(np.array([POS_MAX]), POS_MAX + 16)
    with pytest.raises(MetadataError):
        check_positions(np.array([3, 40]), np.array([64, 32]))  # 40 past its row's 32 keys
