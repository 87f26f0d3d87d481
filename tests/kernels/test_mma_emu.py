"""The H200 bf16 MMA emulator (mma_model.py reference, mma_emu.c native): it reproduces the
bits captured on the H200 (a committed slice of ../shared/measurements/2026-12-01-h200-mma-bits
.npz), the native code equals the reference on every input class and model switch, and the
step's definition holds on hand-computed cases (truncation grid, nominal exponents, signed
zeros, inf/NaN, overflow)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from samebits.kernels.cpu import mma_cases, mma_emu, mma_model
from samebits.kernels.cpu.mma_model import MmaModel

SLICE = Path(__file__).parent / "data" / "h200_mma_bits_slice.npz"
MODELS = [MmaModel()] + [MmaModel(**{f.name: True}) for f in fields(MmaModel)]


def _captured():
    data = np.load(SLICE)
    for key in sorted(k[:-2] for k in data.files if k.endswith("_y")):
        yield (
            key,
            data[f"{key}_x"].view(np.uint16),
            data[f"{key}_w"].view(np.uint16),
            data[f"{key}_y"].view(np.uint32),
        )


def _bf16(values) -> np.ndarray:
    return mma_cases.bf16_bits(np.asarray(values, np.float32))


def _step(x, w, acc_bits: int = 0, model: MmaModel = mma_model.DEFAULT) -> int:
    """One step of one output through the reference, checked against both native paths."""
    x = np.asarray(x, np.uint16).reshape(1, 16)
    w = np.asarray(w, np.uint16).reshape(1, 16)
    acc = np.array([[acc_bits]], np.uint32)
    ref = int(mma_model.mma_k16(x, w, acc, model)[0, 0])
    assert int(mma_emu.chain_bits(x, w, acc, model)[0, 0]) == ref
    assert int(mma_emu.step_scalar_bits(x, w, acc, model.flags())[0, 0]) == ref
    return ref


def _f32_bits(v: float) -> int:
    return int(np.array([v], np.float32).view(np.uint32)[0])


def test_native_builds():
    assert mma_emu.available(), mma_emu.build_error()


def test_slice_is_the_committed_capture():
    total = sum(y.size for _, _, _, y in _captured())
    assert total == 50252  # 4 kinds x K 16/32/64/256/4096, and the project's own K 4096/14336


@pytest.mark.parametrize("impl", ["model", "native"])
def test_reproduces_every_captured_h200_output(impl):
    for key, x, w, y in _captured():
        native = impl == "native"
        got = mma_emu.chain_bits(x, w, threads=2) if native else mma_model.mma_chain(x, w)
        bad = int((got != y).sum())
        assert bad == 0, f"{key}: {bad} of {y.size} outputs differ from the H200"


@pytest.mark.parametrize("kind", sorted(mma_cases.KINDS))
def test_native_equals_reference_on_every_class_and_switch(kind):
    rng = np.random.default_rng(sorted(mma_cases.KINDS).index(kind))
    for k in (16, 48):
        x, w, acc = mma_cases.make_case(kind, 19, 21, k, rng)  # 21: one full tile + 5 lanes
        for model in MODELS:
            ref = mma_model.mma_chain(x, w, acc, model)
            got = mma_emu.chain_bits(x, w, acc, model, threads=2)
            assert np.array_equal(got, ref), (kind, k, model, int((got != ref).sum()))


def test_scalar_step_equals_reference_on_random_bits():
    rng = np.random.default_rng(7)
    x = rng.integers(0, 1 << 16, size=(40, 16), dtype=np.uint16)
    w = rng.integers(0, 1 << 16, size=(30, 16), dtype=np.uint16)
    acc = rng.integers(0, 1 << 32, size=(40, 30), dtype=np.uint64).astype(np.uint32)
    for model in MODELS:
        ref = mma_model.mma_k16(x, w, acc, model)
        assert np.array_equal(mma_emu.step_scalar_bits(x, w, acc, model.flags()), ref)
        assert np.array_equal(mma_emu.chain_bits(x, w, acc, model), ref)


def test_terms_below_the_grid_are_truncated_not_summed():
    # acc 1.0, 16 products 2^-26 each: each is below the grid 2^-25 -> 1.0 (exact: 1 + 2^-22)
    x, w = _bf16([2.0**-13] * 16), _bf16([2.0**-13] * 16)
    assert _step(x, w, _f32_bits(1.0)) == _f32_bits(1.0)
    # products of 2^-25 (on the grid) add up: 16 * 2^-25 = 2^-21
    x = _bf16([2.0**-12] * 16)
    assert _step(x, w, _f32_bits(1.0)) == _f32_bits(1.0 + 2.0**-21)


def test_grid_follows_the_nominal_exponent_of_a_product():
    # (255/128)^2 has nominal exponent 0 (it is 3.97): the grid stays 2^-25, so 8 terms of
    # 2^-25 survive and add one ulp (2^-22) of the result; aligned to its true exponent 1
    # (grid 2^-24) they would all be truncated away.
    big = 255 / 128
    x = _bf16([big] + [2.0**-12] * 8 + [0.0] * 7)
    w = _bf16([big] + [2.0**-13] * 8 + [0.0] * 7)
    assert _step(x, w) == _f32_bits(65025 * 2.0**-14 + 2.0**-22)


def test_result_is_truncated_toward_zero():
    # 1 + 2^-24 + 2^-25 (exact on the grid): 0.75 ulp above 1.0, kept as 1.0 (RN: 1 + 2^-23)
    w = _bf16([1.0, 2.0**-12, 2.0**-13] + [0.0] * 13)
    assert _step(_bf16([1.0, 2.0**-12, 2.0**-12] + [0.0] * 13), w) == _f32_bits(1.0)
    assert _step(_bf16([-1.0, -(2.0**-12), -(2.0**-12)] + [0.0] * 13), w) == _f32_bits(-1.0)


def test_zero_results_are_plus_zero():
    neg_zero, signed = 0x80000000, MmaModel(signed_zeros=True)
    ones, zeros, neg_zeros = _bf16([1.0] * 16), _bf16([0.0] * 16), _bf16([-0.0] * 16)
    assert _step(neg_zeros, ones, neg_zero) == 0  # every term -0: +0 (IEEE: -0)
    assert _step(neg_zeros, ones, neg_zero, signed) == neg_zero
    assert _step(neg_zeros, ones, 0, signed) == 0  # acc +0
    assert _step(zeros, ones, neg_zero, signed) == 0  # products +0
    x = _bf16([3.0, -3.0] + [0.0] * 14)
    assert _step(x, ones, neg_zero, signed) == 0  # exact cancellation: +0 either way
    tiny = _bf16([-(2.0**-75)] + [0.0] * 15)  # -2^-150: on the grid, truncated to zero in fp32
    assert _step(tiny, _bf16([2.0**-75] + [0.0] * 15)) == 0
    assert _step(tiny, _bf16([2.0**-75] + [0.0] * 15), 0, signed) == neg_zero
    tinier = _bf16([-(2.0**-80)] + [0.0] * 15)  # -2^-160: below the floored grid 2^-158
    assert _step(tinier, _bf16([2.0**-80] + [0.0] * 15), 0, signed) == 0
    ones_acc = _f32_bits(1.0)
    assert _step(neg_zeros, ones, ones_acc) == ones_acc  # zero products leave acc exact


def test_inf_and_nan():
    ones = _bf16([1.0] * 16)
    x = _bf16([np.inf] + [1.0] * 15)
    assert _step(x, ones) == 0x7F800000
    assert _step(x, _bf16([-1.0] + [1.0] * 15)) == 0xFF800000
    assert _step(x, _bf16([0.0] + [1.0] * 15)) == mma_model.CANONICAL_NAN  # inf * 0
    assert _step(_bf16([np.inf, -np.inf] + [1.0] * 14), ones) == mma_model.CANONICAL_NAN
    assert _step(_bf16([np.nan] + [1.0] * 15), ones) == mma_model.CANONICAL_NAN
    assert _step(ones, ones, 0xFF800000) == 0xFF800000  # acc -inf
    assert _step(x, ones, 0xFF800000) == mma_model.CANONICAL_NAN  # +inf product, acc -inf
    assert _step(ones, ones, 0x7FC00001) == mma_model.CANONICAL_NAN


def test_overflow_and_subnormal_results():
    big = _bf16([3.0e38] * 16)
    assert _step(big, big) == 0x7F800000
    assert _step(big, big, 0, MmaModel(overflow_to_max=True)) == 0x7F7FFFFF
    assert _step(big, _bf16([-3.0e38] * 16)) == 0xFF800000
    tiny = _bf16([2.0**-75] + [0.0] * 15)  # product 2^-150 * 2^3: subnormal 2^-147
    assert _step(tiny, _bf16([2.0**-72] + [0.0] * 15)) == 1 << 2
    assert _step(tiny, _bf16([2.0**-72] + [0.0] * 15), 0, MmaModel(subnormal_out_ftz=True)) == 0


def test_bf16_subnormal_inputs_are_not_flushed():
    sub = np.array([0x0001] + [0] * 15, np.uint16)  # 2^-133
    w = _bf16([2.0**100] + [0.0] * 15)
    assert _step(sub, w) == _f32_bits(2.0**-33)
    assert _step(sub, w, 0, MmaModel(subnormal_in_ftz=True)) == 0


def test_subnormal_inputs_keep_exponent_minus_126():
    # 2^-133 (subnormal) * 2^100: nominal exponent -26, grid 2^-51, so 8 terms of 2^-56 vanish;
    # with the subnormal normalized (exponent -33, grid 2^-58) they add 2^-53
    x = np.concatenate([[0x0001], _bf16([2.0**-28] * 8 + [0.0] * 7)]).astype(np.uint16)
    w = _bf16([2.0**100] + [2.0**-28] * 8 + [0.0] * 7)
    assert _step(x, w) == _f32_bits(2.0**-33)
    normalized = MmaModel(subnormal_in_normalized=True)
    assert _step(x, w, 0, normalized) == _f32_bits(2.0**-33 + 2.0**-53)


def test_threads_and_tiles_do_not_change_bits():
    rng = np.random.default_rng(3)
    x, w, acc = mma_cases.make_case("wide60", 150, 70, 160, rng)  # 3 row blocks, 5 tiles
    one = mma_emu.chain_bits(x, w, acc, threads=1)
    for threads in (2, 5):
        assert np.array_equal(mma_emu.chain_bits(x, w, acc, threads=threads), one)
    for lo, hi in ((0, 1), (1, 17), (17, 70)):  # w rows alone or in other tiles
        assert np.array_equal(mma_emu.chain_bits(x, w[lo:hi], acc[:, lo:hi]), one[:, lo:hi])
    for lo, hi in ((0, 1), (63, 65), (100, 150)):  # x rows alone or in other row blocks
        assert np.array_equal(mma_emu.chain_bits(x[lo:hi], w, acc[lo:hi]), one[lo:hi])
    sample = mma_model.mma_chain(x[60:68], w, acc[60:68])  # the reference across a block edge
    assert np.array_equal(one[60:68], sample)


def test_torch_interface_returns_the_same_bits():
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(5, 64, generator=gen).to(torch.bfloat16)
    w = torch.randn(7, 64, generator=gen).to(torch.bfloat16)
    acc = torch.randn(5, 7, generator=gen)
    y = mma_emu.mma_chain(x, w, acc)
    assert y.dtype == torch.float32 and y.shape == (5, 7)
    ref = mma_model.mma_chain(
        x.view(torch.int16).numpy(), w.view(torch.int16).numpy(), acc.view(torch.int32).numpy()
    )
    assert np.array_equal(y.view(torch.int32).numpy().view(np.uint32), ref)


def test_bad_input_raises():
    x = np.zeros((2, 32), np.uint16)
    with pytest.raises(ValueError, match="multiple of 16"):
        mma_emu.mma_chain(x[:, :20], x[:, :20])
    with pytest.raises(ValueError, match=r"x \[M,K\] and w \[N,K\]"):
        mma_emu.mma_chain(x, x[:, :16])
    with pytest.raises(TypeError, match="uint16/int16"):
        mma_emu.mma_chain(x.astype(np.float32), x)
    with pytest.raises(ValueError, match="acc must be"):
        mma_emu.mma_chain(x, x, np.zeros((3, 2), np.float32))
    with pytest.raises(ValueError, match="unknown MMA case kind"):
        mma_cases.make_case("nope", 1, 1, 16, np.random.default_rng(0))


def test_fallback_to_the_numpy_model_is_announced(monkeypatch):
    monkeypatch.setattr(mma_emu, "available", lambda: False)
    monkeypatch.setattr(mma_emu, "build_error", lambda: "no C compiler (test)")
    x, w, acc = mma_cases.make_case("wide24", 3, 4, 32, np.random.default_rng(0))
    with pytest.warns(UserWarning, match="no C compiler"):
        got = mma_emu.chain_bits(x, w, acc)
    assert np.array_equal(got, mma_model.mma_chain(x, w, acc))


def test_long_chains_over_several_work_units_equal_the_reference():
    rng = np.random.default_rng(11)
    x, w, acc = mma_cases.make_case("wide24", 3, 40, 4096, rng)  # one tile of w per unit
    ref = mma_model.mma_chain(x, w, acc)
    for threads in (1, 2, 3):
        assert np.array_equal(mma_emu.chain_bits(x, w, acc, threads=threads), ref)


def _at_exponent(rng, shape, lo: int, hi: int) -> np.ndarray:
    """bf16 bits of random signs and significands with exponents drawn in [lo, hi]."""
    e = rng.integers(lo, hi + 1, size=shape)
    sig = 1.0 + rng.integers(0, 128, size=shape) / 128.0
    sign = rng.choice([-1.0, 1.0], size=shape)
    return _bf16(sign * sig * np.exp2(e.astype(np.float64)))


@pytest.mark.parametrize(("x_range", "w_range", "acc_exp"), [
    ((-51, -51), (-51, -51), None),  # every product at exponent -102: the vector step's lowest
    ((-52, -52), (-51, -51), None),  # every product at -103: the block takes the scalar step
    ((63, 63), (63, 63), None),  # products at exponent 126: the highest
    ((64, 64), (63, 63), None),  # at 127: scalar (x * w could overflow fp32)
    (None, (-5, 5), -102),  # zero products: the accumulators set Emax, at the lowest bound
    (None, (-5, 5), -103),  # and below it: those lanes take the scalar step
    ((-5, 5), (-5, 5), -126),  # accumulators at the smallest normal exponent beside products
])  # fmt: skip
def test_vector_step_guard_boundaries_equal_the_reference(x_range, w_range, acc_exp):
    """The native vector step's guard (mma_emu.c `fast_block` / `fast_step`) at and across
    its bounds: the same bits as the reference either way, zero and guarded lanes mixed in a
    tile (a guard one exponent looser gives other bits here: checked by mutation)."""
    rng = np.random.default_rng(7 if x_range is None else abs(x_range[0]))
    x = np.zeros((9, 32), np.uint16) if x_range is None else _at_exponent(rng, (9, 32), *x_range)
    w = _at_exponent(rng, (21, 32), *w_range)
    acc = np.zeros((9, 21), np.uint32)
    if acc_exp is not None:
        acc = _at_exponent(rng, (9, 21), acc_exp, acc_exp).astype(np.uint32) << np.uint32(16)
        acc[::3, ::2] = 0
    for model in MODELS:
        ref = mma_model.mma_chain(x, w, acc, model)
        assert np.array_equal(mma_emu.chain_bits(x, w, acc, model, threads=2), ref), model
