"""Tests of SamplingParams, seeds, counter-based noise, the pure sampler and logprobs."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from samebits.bits import same_bits
from samebits.sampling import (
    MAX_LOGPROBS,
    SAMPLER_FIELDS,
    SEED_LIMIT,
    SamplingParams,
    apply_penalties,
    compute_logprobs,
    derive_seed,
    new_seed,
    noise_key,
    sample,
    truncation_mask,
    uniform_noise,
)

# ---------------------------------------------------------------------------------------------
# SamplingParams validation


BAD_FIELDS = [
    ("n", 0),
    ("n", 1.0),
    ("n", True),
    ("temperature", -0.1),
    ("temperature", math.inf),
    ("temperature", math.nan),
    ("temperature", "1.0"),
    ("temperature", True),
    ("top_p", 0.0),
    ("top_p", 1.5),
    ("top_k", -2),
    ("top_k", 2.0),
    ("min_p", -0.1),
    ("min_p", 1.1),
    ("repetition_penalty", 0.0),
    ("repetition_penalty", -1.0),
    ("presence_penalty", 2.5),
    ("frequency_penalty", -2.5),
    ("stop", 5),
    ("stop", [""]),
    ("stop", ["ok", 3]),
    ("stop_token_ids", [-1]),
    ("stop_token_ids", [True]),
    ("stop_token_ids", 7),
    ("max_tokens", 0),
    ("max_tokens", False),
    ("ignore_eos", 1),
    ("logprobs", -1),
    ("logprobs", MAX_LOGPROBS + 1),
    ("logprobs", 2.0),
    ("seed", -1),
    ("seed", SEED_LIMIT),
    ("seed", False),
    ("return_logits", "yes"),
    ("skip_special_tokens", None),
    ("include_stop_str_in_output", 0),
    ("min_tokens", -1),
    ("min_tokens", 17),  # > max_tokens (16)
    ("min_tokens", 1.0),
    ("prompt_logprobs", -1),
    ("prompt_logprobs", MAX_LOGPROBS + 1),
    ("prompt_logprobs", True),
    ("logit_bias", 5),
    ("logit_bias", [(1, 2, 3)]),
    ("logit_bias", {-1: 1.0}),
    ("logit_bias", {"x": 1.0}),
    ("logit_bias", {True: 1.0}),
    ("logit_bias", {3: 100.5}),
    ("logit_bias", {3: math.inf}),
    ("logit_bias", {3: "1"}),
]


@pytest.mark.parametrize(("name", "value"), BAD_FIELDS)
def test_bad_field_raises_naming_field_and_value(name, value):
    with pytest.raises(ValueError) as info:
        SamplingParams(**{name: value})
    assert name in str(info.value)
    assert repr(value) in str(info.value)


def test_defaults_and_normalization():
    params = SamplingParams(stop="END", stop_token_ids=[3, 4], top_k=-1, temperature=0)
    assert params.stop == ("END",)
    assert params.stop_token_ids == (3, 4)
    assert params.top_k == 0
    assert isinstance(params.temperature, float)
    assert SamplingParams(stop=["a", "b"]).stop == ("a", "b")


def test_boundary_values_are_accepted():
    SamplingParams(
        temperature=0.0,
        top_p=1.0,
        min_p=1.0,
        presence_penalty=-2.0,
        frequency_penalty=2.0,
        logprobs=MAX_LOGPROBS,
        seed=SEED_LIMIT - 1,
    )


def test_with_seed_validates_and_copies():
    params = SamplingParams(temperature=0.5)
    seeded = params.with_seed(42)
    assert seeded.seed == 42 and params.seed is None
    assert seeded.temperature == 0.5
    with pytest.raises(ValueError, match="seed"):
        params.with_seed(-3)


def test_to_dict_from_dict_round_trip_through_json():
    params = SamplingParams(
        n=3,
        temperature=0.7,
        top_p=0.9,
        top_k=40,
        min_p=0.05,
        repetition_penalty=1.1,
        presence_penalty=0.3,
        frequency_penalty=-0.2,
        stop=["\n\n", "END"],
        stop_token_ids=[2, 7],
        max_tokens=99,
        ignore_eos=True,
        logprobs=5,
        seed=123456789012345,
        return_logits=True,
        skip_special_tokens=False,
        include_stop_str_in_output=True,
        min_tokens=4,
        logit_bias={7: -100, 2: 3.5},
        prompt_logprobs=2,
    )
    restored = SamplingParams.from_dict(json.loads(json.dumps(params.to_dict())))
    assert restored == params
    assert restored.to_dict() == params.to_dict()


def test_logit_bias_normalized_to_sorted_pairs():
    params = SamplingParams(logit_bias={9: 1, "3": -2.5})
    assert params.logit_bias == ((3, -2.5), (9, 1.0))
    assert dict(params.logit_bias) == {3: -2.5, 9: 1.0}
    assert SamplingParams(logit_bias=[(9, 1.0), (3, -2.5)]) == params
    assert SamplingParams(logit_bias=None).logit_bias == ()
    assert params.to_dict()["logit_bias"] == [[3, -2.5], [9, 1.0]]
    with pytest.raises(ValueError, match="distinct"):
        SamplingParams(logit_bias={3: 1.0, "3": 2.0})
    hash(params)  # stays hashable (frozen)


def test_from_dict_rejects_unknown_fields():
    with pytest.raises(ValueError, match="bogus"):
        SamplingParams.from_dict({"temperature": 1.0, "bogus": 1})


def test_sampler_state_requires_seed_and_lists_sampler_fields():
    with pytest.raises(ValueError, match="seed"):
        SamplingParams().sampler_state()
    state = SamplingParams(max_tokens=5, seed=9).sampler_state()
    assert tuple(name for name, _ in state) == SAMPLER_FIELDS
    # fields that only decide stopping or reporting do not enter the sampler state
    assert state == SamplingParams(max_tokens=50, stop="x", logprobs=2, seed=9).sampler_state()
    assert state != SamplingParams(max_tokens=5, seed=10).sampler_state()
    for changed in ({"logit_bias": {1: 1.0}}, {"min_tokens": 2}):
        assert state != SamplingParams(max_tokens=5, seed=9, **changed).sampler_state()
    # stop_token_ids / ignore_eos decide tokens only through min_tokens' mask
    assert state == SamplingParams(max_tokens=5, seed=9, stop_token_ids=[4]).sampler_state()
    masked = SamplingParams(max_tokens=5, seed=9, min_tokens=1)
    other = SamplingParams(max_tokens=5, seed=9, min_tokens=1, stop_token_ids=[4])
    assert masked.sampler_state() != other.sampler_state()


def test_logit_bias_and_min_tokens_in_the_sampler():
    logits = np.array([3.0, 1.0, 0.5, 2.0], dtype=np.float32)
    greedy = SamplingParams(temperature=0.0)
    assert sample(logits, greedy, 0, 0, [], []) == 0
    assert sample(logits, SamplingParams(temperature=0.0, logit_bias={2: 2.6}), 0, 0, [], []) == 2
    for seed in range(20):  # a +100 bias forces the token under sampling too
        forced = SamplingParams(temperature=1.0, logit_bias={1: 100.0})
        assert sample(logits, forced, seed, 3, [], []) == 1
    # min_tokens masks EOS (given by the deployment) and stop ids at positions < min_tokens
    params = SamplingParams(temperature=0.0, min_tokens=2, stop_token_ids=[3])
    assert sample(logits, params, 0, 0, [], [], eos_token_ids=[0]) == 1
    assert sample(logits, params, 0, 1, [], [1], eos_token_ids=[0]) == 1
    assert sample(logits, params, 0, 2, [], [1, 1], eos_token_ids=[0]) == 0
    ignore = SamplingParams(temperature=0.0, min_tokens=2, ignore_eos=True)
    assert sample(logits, ignore, 0, 0, [], [], eos_token_ids=[0]) == 0
    with pytest.raises(ValueError, match="logit_bias token id 9"):
        sample(logits, SamplingParams(logit_bias={9: 1.0}), 0, 0, [], [])


# ---------------------------------------------------------------------------------------------
# Seeds


def test_derive_seed():
    assert derive_seed(77, 0) == 77
    derived = [derive_seed(77, i) for i in range(1, 200)]
    assert derived == [derive_seed(77, i) for i in range(1, 200)]
    assert len(set(derived)) == len(derived)
    assert 77 not in derived
    assert all(0 <= s < SEED_LIMIT for s in derived)
    assert derive_seed(78, 1) != derive_seed(77, 1)
    with pytest.raises(ValueError, match="index"):
        derive_seed(1, -1)


def test_expand_n_derives_each_choice():
    params = SamplingParams(
        n=3, temperature=0.7, top_k=5, stop=["x"], logit_bias={4: 1.5}, max_tokens=9, seed=77
    )
    choices = params.expand_n()
    # pinned: changing how a choice's seed is derived changes every replayed n > 1 request
    assert [c.seed for c in choices] == [77, 1415096084101229369, 3671060520255609958]
    assert [c.seed for c in choices] == [derive_seed(77, i) for i in range(3)]
    assert all(c.n == 1 for c in choices)
    for choice in choices:
        assert dataclasses.replace(choice, n=3, seed=77) == params
    # choice 0 is the same request with n = 1
    assert choices[0] == dataclasses.replace(params, n=1)
    assert SamplingParams(seed=5).expand_n() == [SamplingParams(seed=5)]
    with pytest.raises(ValueError, match="seed must be set"):
        SamplingParams(n=2).expand_n()


def test_new_seed_in_range():
    seeds = [new_seed() for _ in range(50)]
    assert all(isinstance(s, int) and 0 <= s < SEED_LIMIT for s in seeds)
    assert len(set(seeds)) > 1


# ---------------------------------------------------------------------------------------------
# Counter-based noise

_M64 = (1 << 64) - 1


def _splitmix_reference(x: int) -> int:
    """Independent pure-Python splitmix64 finalizer (big ints, explicit masking)."""
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) % (1 << 64)
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) % (1 << 64)
    return x ^ (x >> 31)


def _noise_reference(seed: int, position: int, vocab_id: int) -> float:
    golden = 0x9E3779B97F4A7C15
    key = _splitmix_reference((_splitmix_reference(seed) + position * golden) & _M64)
    bits = _splitmix_reference((key + (vocab_id + 1) * golden) & _M64)
    return ((bits >> 11) + 0.5) / 2.0**53


@pytest.mark.parametrize(("seed", "position"), [(0, 0), (1, 5), (SEED_LIMIT - 1, 123456)])
def test_noise_matches_scalar_reference_bitwise(seed, position):
    noise = uniform_noise(seed, position, 300)
    expected = np.array([_noise_reference(seed, position, i) for i in range(300)])
    assert same_bits(noise, expected)


def test_noise_depends_only_on_seed_position_and_id():
    a = uniform_noise(11, 3, 1000)
    _ = uniform_noise(999, 7, 5000)  # other calls in between change nothing
    assert same_bits(uniform_noise(11, 3, 1000), a)
    assert same_bits(uniform_noise(11, 3, 4000)[:1000], a)
    assert same_bits(uniform_noise(11, 3, 10), a[:10])
    assert not np.array_equal(uniform_noise(11, 4, 1000), a)
    assert not np.array_equal(uniform_noise(12, 3, 1000), a)


def test_noise_is_in_open_unit_interval_and_roughly_uniform():
    noise = uniform_noise(5, 0, 100_000)
    assert noise.dtype == np.float64
    assert noise.min() > 0.0 and noise.max() < 1.0
    counts = np.histogram(noise, bins=10, range=(0.0, 1.0))[0]
    assert counts.min() > 9_500 and counts.max() < 10_500


def test_noise_keys_of_positions_are_distinct():
    keys = {noise_key(3, p) for p in range(10_000)}
    assert len(keys) == 10_000


# ---------------------------------------------------------------------------------------------
# The sampler


def _logits(probs) -> np.ndarray:
    return np.log(np.asarray(probs, dtype=np.float64)).astype(np.float32)


def test_sample_is_pure_and_does_not_mutate_input():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal(5000).astype(np.float32)
    before = logits.copy()
    prompt, output = [1, 2, 3], [4, 4]
    params = SamplingParams(temperature=0.8, top_p=0.9, top_k=50, repetition_penalty=1.2)
    first = sample(logits, params, 1234, 7, prompt, output)
    for _ in range(3):
        assert sample(logits, params, 1234, 7, prompt, output) == first
    assert same_bits(logits, before) and logits.dtype == np.float32
    assert prompt == [1, 2, 3] and output == [4, 4]


def test_sample_draws_differ_across_positions_and_seeds():
    logits = np.zeros(1000, dtype=np.float32)
    params = SamplingParams()
    by_position = {sample(logits, params, 1, p, [], []) for p in range(50)}
    by_seed = {sample(logits, params, s, 0, [], []) for s in range(50)}
    assert len(by_position) > 30 and len(by_seed) > 30


def test_greedy_ties_pick_lowest_id_and_ignore_seed():
    logits = np.array([0.5, 2.0, -1.0, 2.0, 2.0], dtype=np.float32)
    params = SamplingParams(temperature=0.0)
    assert {sample(logits, params, s, s, [], []) for s in range(20)} == {1}


def test_top_k_tie_keeps_lowest_id_when_sampling():
    logits = np.array([1.0, 3.0, 3.0, 0.0], dtype=np.float32)
    params = SamplingParams(top_k=1)
    assert {sample(logits, params, s, 0, [], []) for s in range(50)} == {1}


def test_sample_frequencies_follow_softmax():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    logits = _logits(probs)
    params = SamplingParams(temperature=1.0)
    draws = [sample(logits, params, s, 0, [], []) for s in range(4000)]
    freq = np.bincount(draws, minlength=4) / len(draws)
    assert np.all(np.abs(freq - probs) < 0.03)


def test_temperature_sharpens():
    logits = _logits([0.4, 0.3, 0.2, 0.1])
    cold = [sample(logits, SamplingParams(temperature=0.02), s, 0, [], []) for s in range(500)]
    assert np.bincount(cold, minlength=4)[0] > 495


def _scaled(probs, temperature=1.0):
    x = np.log(np.asarray(probs, dtype=np.float64))
    return (x - x.max()) / temperature


@pytest.mark.parametrize(
    ("kwargs", "kept"),
    [
        ({}, [0, 1, 2, 3]),
        ({"top_k": 2}, [0, 1]),
        ({"top_k": 4}, [0, 1, 2, 3]),
        ({"top_k": 10}, [0, 1, 2, 3]),
        ({"top_p": 0.45}, [0]),
        ({"top_p": 0.7}, [0, 1]),
        ({"top_p": 0.85}, [0, 1, 2]),
        ({"top_p": 0.99}, [0, 1, 2, 3]),
        ({"min_p": 0.2}, [0, 1, 2]),
        ({"min_p": 0.5}, [0, 1]),
        ({"min_p": 1.0}, [0]),
        ({"top_k": 3, "top_p": 0.82}, [0, 1]),  # mass renormalized within the top 3: .8/.95
        ({"top_k": 3, "min_p": 0.5}, [0, 1]),
    ],
)
def test_truncation_mask_keeps_the_right_set(kwargs, kept):
    # probs ranked in a scrambled id order to check ranking, not id order
    probs = np.array([0.15, 0.5, 0.05, 0.3])
    rank_to_id = [1, 3, 0, 2]
    mask = truncation_mask(_scaled(probs), SamplingParams(**kwargs))
    assert np.flatnonzero(mask).tolist() == sorted(rank_to_id[r] for r in kept)


def test_truncation_ties_rank_lower_id_first():
    mask = truncation_mask(_scaled([0.2, 0.4, 0.4]), SamplingParams(top_k=1))
    assert np.flatnonzero(mask).tolist() == [1]


def test_sampled_tokens_stay_in_kept_set_and_cover_it():
    probs = np.array([0.05, 0.3, 0.02, 0.35, 0.28])
    logits = _logits(probs)
    for kwargs in ({"top_k": 3}, {"top_p": 0.6}, {"min_p": 0.5}):
        params = SamplingParams(**kwargs)
        kept = set(np.flatnonzero(truncation_mask(_scaled(probs), params)).tolist())
        drawn = {sample(logits, params, s, 3, [], []) for s in range(400)}
        assert drawn == kept, kwargs


def test_masked_logits_are_never_sampled():
    logits = np.array([-np.inf, 0.0, -np.inf, 0.0], dtype=np.float32)
    assert {sample(logits, SamplingParams(), s, 0, [], []) for s in range(200)} == {1, 3}


def test_penalties_match_hand_computation():
    logits = np.array([2.0, -1.0, 0.5, 3.0, 0.0], dtype=np.float32)
    params = SamplingParams(repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25)
    out = apply_penalties(logits, params, prompt_token_ids=[0, 4], output_token_ids=[1, 3, 3])
    # repetition over {0, 1, 3, 4}: 2/2, -1*2, 3/2, 0/2; then frequency (counts 1 -> id 1,
    # 2 -> id 3) and presence over output ids {1, 3}
    expected = np.array([1.0, -2.0 - 0.5 - 0.25, 0.5, 1.5 - 1.0 - 0.25, 0.0])
    assert same_bits(out, expected)
    assert out.dtype == np.float64


def test_penalties_change_the_greedy_choice():
    logits = np.array([1.0, 0.9, 0.0], dtype=np.float32)
    greedy = SamplingParams(temperature=0.0)
    assert sample(logits, greedy, 0, 0, [], [0]) == 0
    penalized = SamplingParams(temperature=0.0, presence_penalty=0.5)
    assert sample(logits, penalized, 0, 0, [], [0]) == 1
    repeated = SamplingParams(temperature=0.0, repetition_penalty=1.5)
    assert sample(logits, repeated, 0, 0, [0], []) == 1


def test_sample_rejects_bad_inputs():
    params = SamplingParams()
    ok = np.zeros(4, dtype=np.float32)
    with pytest.raises(ValueError, match="1-D"):
        sample(np.zeros((2, 4), dtype=np.float32), params, 0, 0, [], [])
    with pytest.raises(ValueError, match="floating"):
        sample(np.zeros(4, dtype=np.int32), params, 0, 0, [], [])
    with pytest.raises(ValueError, match="NaN"):
        sample(np.array([0.0, np.nan], dtype=np.float32), params, 0, 0, [], [])
    with pytest.raises(ValueError, match="no finite"):
        sample(np.full(3, -np.inf, dtype=np.float32), params, 0, 0, [], [])
    with pytest.raises(ValueError, match="output_token_ids"):
        sample(ok, params, 0, 0, [], [4])
    with pytest.raises(ValueError, match="prompt_token_ids"):
        sample(ok, params, 0, 0, [1.5], [])
    with pytest.raises(ValueError, match="seed"):
        sample(ok, SamplingParams(temperature=0.0), SEED_LIMIT, 0, [], [])
    with pytest.raises(ValueError, match="position"):
        sample(ok, params, 0, -1, [], [])
    with pytest.raises(ValueError, match="seed"):
        sample(ok, params, -5, 0, [], [])


# ---------------------------------------------------------------------------------------------
# Logprobs


def test_compute_logprobs_matches_log_softmax():
    logits = np.array([1.0, 3.0, 3.0, -2.0, 0.5], dtype=np.float32)
    out = compute_logprobs(logits, token_id=3, num_top=2)
    assert list(out) == [3, 1, 2]  # sampled first, then top ids with ties -> lower id
    norm = math.log(math.fsum(math.exp(float(v)) for v in logits))
    for token, logprob in out.items():
        assert logprob == pytest.approx(float(logits[token]) - norm, abs=1e-12)
    assert compute_logprobs(logits, 3, 2) == out


def test_compute_logprobs_sampled_token_in_top_is_not_duplicated():
    logits = np.array([0.0, 2.0, 1.0], dtype=np.float32)
    out = compute_logprobs(logits, token_id=1, num_top=2)
    assert list(out) == [1, 2]
    assert list(compute_logprobs(logits, token_id=0, num_top=0)) == [0]
    with pytest.raises(ValueError, match="token_id"):
        compute_logprobs(logits, token_id=3, num_top=1)
