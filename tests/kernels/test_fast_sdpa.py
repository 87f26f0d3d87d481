"""The fast plan's per-request SDPA (`kernels/cpu/sdpa.py`): causal by absolute position in every
case the engine schedules, without a dense mask where the queries are the keys' last rows, and
in memory-bounded query blocks elsewhere (windows, positions that are not a suffix)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from samebits.kernels.cpu import sdpa

HEADS, D = 4, 16


def _qkv(n: int, keys: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(HEADS, n, D, generator=g)
    k = torch.randn(HEADS, keys, D, generator=g)
    v = torch.randn(HEADS, keys, D, generator=g)
    return q, k, v


def _reference(q, k, v, pos, window: int) -> np.ndarray:
    """float64 softmax over the keys each row may see."""
    q64, k64, v64 = (t.double().numpy() for t in (q, k, v))
    out = np.empty_like(q64)
    for i, t in enumerate(pos):
        lo = max(0, t - window + 1) if window > 0 else 0
        s = np.einsum("hd,hkd->hk", q64[:, i], k64[:, lo : t + 1]) * D**-0.5
        w = np.exp(s - s.max(-1, keepdims=True))
        out[:, i] = np.einsum("hk,hkd->hd", w / w.sum(-1, keepdims=True), v64[:, lo : t + 1])
    return out


CASES = {  # name: (positions, keys, window)
    "prompt": (np.arange(40), 40, 0),
    "chunk after cached keys": (np.arange(25, 40), 40, 0),
    "decode": (np.array([39]), 40, 0),
    "window": (np.arange(10, 40), 40, 7),
    "not a suffix": (np.array([3, 9, 20]), 40, 0),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_causal_sdpa_matches_the_reference(name):
    pos, keys, window = CASES[name]
    q, k, v = _qkv(len(pos), keys, seed=len(name))
    got = sdpa.causal_sdpa(q, k, v, pos, D**-0.5, window)
    np.testing.assert_allclose(got.double().numpy(), _reference(q, k, v, pos, window), 2e-5, 2e-5)


def test_suffix_queries_run_without_a_dense_mask(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the dense-mask path ran")

    monkeypatch.setattr(sdpa, "masked_blocks", refuse)
    for name in ("prompt", "chunk after cached keys", "decode"):
        pos, keys, window = CASES[name]
        q, k, v = _qkv(len(pos), keys, seed=1)
        sdpa.causal_sdpa(q, k, v, pos, D**-0.5, window)
    with pytest.raises(AssertionError, match="dense-mask"):
        pos, keys, window = CASES["window"]
        sdpa.causal_sdpa(*_qkv(len(pos), keys, seed=1), pos, D**-0.5, window)


@pytest.mark.parametrize("name", ["prompt", "chunk after cached keys", "decode"])
def test_suffix_queries_run_on_a_fused_kernel(name):
    # a 3-D call has no fused kernel ("No available kernel" here): PyTorch's math fallback
    # then materializes heads x queries x keys scores (8 GiB at 8k tokens, 32 heads)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    pos, keys, window = CASES[name]
    q, k, v = _qkv(len(pos), keys, seed=2)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        got = sdpa.causal_sdpa(q, k, v, pos, D**-0.5, window)
    np.testing.assert_allclose(got.double().numpy(), _reference(q, k, v, pos, window), 2e-5, 2e-5)


@pytest.mark.parametrize("window", [0, 7])
def test_masked_blocks_stay_under_the_bound(monkeypatch, window):
    monkeypatch.setattr(sdpa, "MASK_BLOCK_ELEMENTS", HEADS * 40 * 3)  # 3 query rows a block
    sizes: list[int] = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(q, k, v, attn_mask=None, **kw):
        sizes.append(q.shape[-3] * attn_mask.numel())  # heads x queries x keys
        return real(q, k, v, attn_mask=attn_mask, **kw)

    monkeypatch.setattr(sdpa.F, "scaled_dot_product_attention", spy)
    pos = np.array([3, 9, 20, 21, 22, 30, 39])
    q, k, v = _qkv(len(pos), 40, seed=5)
    got = sdpa.masked_blocks(q, k, v, pos, D**-0.5, window)
    assert len(sizes) == 3 and max(sizes) <= sdpa.MASK_BLOCK_ELEMENTS
    np.testing.assert_allclose(got.double().numpy(), _reference(q, k, v, pos, window), 2e-5, 2e-5)


def test_is_suffix():
    assert sdpa.is_suffix(np.arange(5, 9), 9)
    assert not sdpa.is_suffix(np.arange(5, 9), 10)  # a key after the last query
    assert not sdpa.is_suffix(np.array([5, 7, 8]), 9)  # a gap
