"""sbgemm reading GGUF Q4_1 / Q8_0 blocks or bfloat16 / float16 values gives, bit for bit, the
outputs of sbgemm on the float32 weights gguf-py / torch widen them to, for any row count, row
position and thread count; and it refuses stored weights that do not expand to the given one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from quantized_weights import from_raw, random_bf16, random_f16, random_q4_1, random_q8_0
from samebits.bits import same_bits
from samebits.kernels.cpu import sbgemm
from samebits.kernels.quantized import QuantizedTensor

MAKERS = {"Q4_1": random_q4_1, "Q8_0": random_q8_0, "BF16": random_bf16, "F16": random_f16}
MIN_SHRINK = {"Q4_1": 3, "Q8_0": 3, "BF16": 1.9, "F16": 1.9}


@pytest.fixture(autouse=True)
def _always_parallel(monkeypatch):
    monkeypatch.setattr(sbgemm, "PARALLEL_MIN_MACS", 0)


@pytest.mark.parametrize("qtype", sorted(MAKERS))
@pytest.mark.parametrize("rows,k", [(70, 64), (96, 160), (33, 576)])
def test_quantized_equals_float32_bitwise(qtype, rows, k):
    gen = torch.Generator().manual_seed(rows * k)
    source, weight = MAKERS[qtype](rows, k, gen)
    dense = sbgemm.SbLinear(weight, None, 1)
    x = torch.randn(19, k, generator=gen)
    expected = dense(x)
    for threads in (1, 2, 3):
        linear = sbgemm.SbLinear(weight, None, threads, source)
        assert linear.format == qtype
        assert linear.packed.numel() * MIN_SHRINK[qtype] <= dense.packed.numel()
        assert same_bits(linear(x), expected)
        for i in (0, 7, 18):  # alone, or a row of any position, gives the same bits
            assert same_bits(linear(x[i : i + 1]), expected[i : i + 1])


def test_zero_signs_survive_expansion():
    """Blocks with d = -0.0 / m = -0.0 give -0.0 weights; the check compares bits, so a
    kernel producing +0.0 instead would be refused."""
    raw = random_q4_1(64, 64, torch.Generator().manual_seed(3))[0].data.numpy().copy()
    raw[0, 0:2] = np.array([-1.0], np.float16).view(np.uint8)  # d of row 0, block 0
    raw[0, 2:4] = np.array([-0.0], np.float16).view(np.uint8)  # m
    raw[0, 4] = 0x10  # k = 0 -> q = 0: w = -1 * 0 + -0 = -0.0; k = 16 -> q = 1: w = -1.0
    source, weight = from_raw("Q4_1", raw, 64, 64)
    assert weight[0, 0].view(torch.int32) == torch.tensor(-0.0).view(torch.int32)
    assert weight[0, 16] == -1.0
    assert sbgemm.SbLinear(weight, None, 1, source).format == "Q4_1"  # expansion kept -0.0


def test_blocks_not_matching_the_weight_are_refused():
    gen = torch.Generator().manual_seed(4)
    source, weight = random_q8_0(32, 64, gen)
    nudged = weight.clone()
    nudged[5, 7] = torch.nextafter(nudged[5, 7], torch.tensor(float("inf")))
    with pytest.raises(RuntimeError, match="differs from the float32 weight"):
        sbgemm.SbLinear(nudged, None, 1, source)


def test_unsupported_sources_fall_back_to_float32():
    gen = torch.Generator().manual_seed(5)
    source, weight = random_q4_1(32, 64, gen)
    other = QuantizedTensor("Q6_K", source.shape, source.data)
    assert sbgemm.SbLinear(weight, None, 1, other).format == "F32"


def test_fused_rows_concatenate():
    gen = torch.Generator().manual_seed(6)
    (a, wa), (b, wb) = random_q4_1(40, 96, gen), random_q4_1(24, 96, gen)
    fused = QuantizedTensor.concat([a, b])
    linear = sbgemm.SbLinear(torch.cat([wa, wb]), None, 2, fused)
    x = torch.randn(3, 96, generator=gen)
    assert linear.format == "Q4_1"
    assert same_bits(linear(x), sbgemm.SbLinear(torch.cat([wa, wb]), None, 1)(x))
    assert QuantizedTensor.concat([a, None]) is None
    assert QuantizedTensor.concat([a, random_q8_0(8, 96, gen)[0]]) is None


@pytest.mark.parametrize("maker", [random_bf16, random_f16])
def test_half_precision_of_any_width(maker):
    gen = torch.Generator().manual_seed(7)
    source, weight = maker(41, 45, gen)  # K not a multiple of 32 or of the vector width
    x = torch.randn(6, 45, generator=gen)
    linear = sbgemm.SbLinear(weight, None, 2, source)
    assert linear.format == source.qtype
    assert same_bits(linear(x), sbgemm.SbLinear(weight, None, 1)(x))
