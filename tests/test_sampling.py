"""llamanb.engine.sampling: the distribution a sampler draws from against closed forms, the repeat
penalty's rule, and the one random stream a Sampler owns."""
import math

import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.engine.sampling import (Sampler, SamplingParams, next_token_probs, repeat_penalty, sample)


def softmax64(z):
    z = np.asarray(z, dtype=np.float64)
    e = np.exp(z - z.max())
    return e / e.sum()


# ---- the sampling distribution, closed form ------------------------------------------------------
def test_greedy_is_one_hot_at_argmax():
    logits = np.array([0.5, 3.0, -1.0, 2.9], dtype=np.float32)
    p = next_token_probs(logits, SamplingParams(temperature=0.0))
    assert p.tolist() == [0.0, 1.0, 0.0, 0.0]


def test_top_k_1_equals_greedy():
    rng = np.random.default_rng(0)
    for _ in range(20):
        logits = rng.standard_normal(50).astype(np.float32) * 3
        for T in (0.3, 1.0, 5.0):
            p = next_token_probs(logits, SamplingParams(temperature=T, top_k=1))
            assert p[int(np.argmax(logits))] == 1.0 and p.sum() == 1.0
            assert sample(logits, SamplingParams(temperature=T, top_k=1, seed=1), rng) == int(np.argmax(logits))


@pytest.mark.parametrize("T", [0.1, 0.7, 1.0, 1.5, 10.0])
def test_temperature_is_softmax_of_scaled_logits(T):
    rng = np.random.default_rng(1)
    logits = (rng.standard_normal(1000) * 4).astype(np.float32)
    p = next_token_probs(logits, SamplingParams(temperature=T))
    np.testing.assert_allclose(p, softmax64(logits.astype(np.float64) / T), rtol=1e-9, atol=1e-15)
    assert math.isclose(p.sum(), 1.0, rel_tol=1e-12)


def test_top_k_keeps_k_largest():
    logits = np.log(np.array([0.05, 0.4, 0.1, 0.3, 0.15]))
    p = next_token_probs(logits, SamplingParams(temperature=1.0, top_k=3))
    expected = np.array([0, 0.4, 0, 0.3, 0.15]) / 0.85
    np.testing.assert_allclose(p, expected, rtol=1e-12, atol=1e-15)


# hand-made distribution, shuffled so that order does not come for free
PROBS = np.array([0.05, 0.30, 0.02, 0.50, 0.13])      # sorted: .50 .30 .13 .05 .02


@pytest.mark.parametrize("top_p,kept", [
    (0.30, [3]),                 # .50 alone already reaches 0.30
    (0.50, [3]),                 # .50 >= .50 (no tie trouble: the next one is not needed)
    (0.65, [3, 1]),              # .50 < .65 <= .80
    (0.85, [3, 1, 4]),           # .80 < .85 <= .93
    (0.95, [3, 1, 4, 0]),        # .93 < .95 <= .98
    (0.99, [3, 1, 4, 0, 2]),
    (1.0, [3, 1, 4, 0, 2]),
])
def test_top_p_keeps_minimal_prefix(top_p, kept):
    logits = np.log(PROBS)
    p = next_token_probs(logits, SamplingParams(temperature=1.0, top_p=top_p))
    expected = np.zeros_like(PROBS)
    expected[kept] = PROBS[kept] / PROBS[kept].sum()
    np.testing.assert_allclose(p, expected, rtol=1e-12, atol=1e-15)


def test_temperature_then_top_k_then_top_p():
    """Order of operations (as transformers' logits processors): temperature, top-k, top-p."""
    logits = np.log(PROBS) * 2.0
    p = next_token_probs(logits, SamplingParams(temperature=2.0, top_k=4, top_p=0.85))
    # temperature 2 on 2*log(p) gives PROBS back; top-4 drops .02; renormalised by .98;
    # cumulative .5/.98=.51, .8/.98=.816, .93/.98=.949 -> .85 needs three tokens
    q = PROBS.copy()
    q[2] = 0
    q /= q.sum()
    expected = np.zeros_like(q)
    expected[[3, 1, 4]] = q[[3, 1, 4]] / q[[3, 1, 4]].sum()
    np.testing.assert_allclose(p, expected, rtol=1e-12, atol=1e-15)


def test_sampling_frequencies_follow_the_distribution():
    rng = np.random.default_rng(123)
    logits = np.log(PROBS)
    params = SamplingParams(temperature=1.0)
    n = 20000
    counts = np.bincount([sample(logits, params, rng) for _ in range(n)], minlength=5) / n
    # 5 sigma of a binomial proportion at n = 20000 is < 0.018
    np.testing.assert_allclose(counts, PROBS, atol=0.018)


@pytest.mark.parametrize("kwargs", [
    {"temperature": -1.0}, {"temperature": float("nan")}, {"top_k": 0}, {"top_k": -3},
    {"top_p": 0.0}, {"top_p": 1.5}, {"top_p": -0.1}, {"top_p": float("nan")},
])
def test_invalid_params_raise(kwargs):
    with pytest.raises(LlamanbError):
        SamplingParams(**kwargs)


# ---- greedy, the repeat penalty, the random stream --------------------------------------------------
def test_greedy_is_the_argmax_and_draws_nothing():
    rng = np.random.default_rng(7)
    state = rng.bit_generator.state
    z = np.array([1.0, 3.0, 3.0, -2.0], dtype=np.float32)                   # a tie: the lower id
    assert sample(z, SamplingParams(), rng) == 1
    assert rng.bit_generator.state == state
    np.testing.assert_array_equal(next_token_probs(z, SamplingParams()), [0, 1, 0, 0])


def test_repeat_penalty_closed_form():
    """llama.cpp's rule: a seen token's logit / penalty if positive, * penalty if negative."""
    z = np.array([2.0, -2.0, 4.0, -1.0, 5.0, 0.5], dtype=np.float32)
    out = repeat_penalty(z, [0, 1, 1, 4], 1.25, exempt={4})
    np.testing.assert_array_equal(out, np.array([1.6, -2.5, 4.0, -1.0, 5.0, 0.5], dtype=np.float32))
    assert repeat_penalty(z, [0, 1], 1.0) is z                                 # 1 = off
    # the Sampler looks back repeat_last_n ids only
    s = Sampler(SamplingParams(repeat_penalty=2.0, repeat_last_n=2), exempt={4})
    np.testing.assert_array_equal(s.penalize(z, [0, 2, 3]),
                                  np.array([2.0, -2.0, 2.0, -2.0, 5.0, 0.5], dtype=np.float32))
    # greedy with a penalty: the penalised favourite loses to the runner-up
    assert Sampler(SamplingParams(repeat_penalty=2.0))(z, [4]) == 2
    assert Sampler(SamplingParams(repeat_penalty=2.0), exempt={4})(z, [4]) == 4


def test_sampler_owns_one_seeded_stream():
    """A Sampler's draws are numpy's default_rng(seed) drawing from next_token_probs, one call
    per token: the same stream generate, a chat and each serving request drew before the Sampler
    existed (so seeded outputs did not change)."""
    params = SamplingParams(temperature=0.8, top_k=4, seed=5)
    rng = np.random.default_rng(5)
    logits = [np.random.default_rng(i).standard_normal(30).astype(np.float32) for i in range(20)]
    want = [int(rng.choice(30, p=next_token_probs(z, params))) for z in logits]
    s = Sampler(params)
    assert [s(z) for z in logits] == want
    again = Sampler(params)
    assert [again(z) for z in logits] == want
    other = Sampler(SamplingParams(temperature=0.8, top_k=4, seed=6))
    assert [other(z) for z in logits] != want


@pytest.mark.parametrize("kwargs, fragment", [
    ({"repeat_penalty": 0.9}, "repeat_penalty must be a number >= 1"),
    ({"repeat_penalty": float("nan")}, "repeat_penalty"),
    ({"repeat_last_n": 0}, "repeat_last_n must be an integer >= 1"),
    ({"repeat_last_n": 2.5}, "repeat_last_n"),
    ({"temperature": -1}, "temperature"),
])
def test_bad_params_are_one_line(kwargs, fragment):
    with pytest.raises(LlamanbError, match=fragment) as info:
        SamplingParams(**kwargs)
    assert "\n" not in str(info.value)
    with pytest.raises(LlamanbError, match="SamplingParams"):
        Sampler({"temperature": 1.0})


def test_old_homes_still_work():
    import importlib

    import llamanb

    g = importlib.import_module("llamanb.engine.generate")

    assert g.SamplingParams is SamplingParams and g.sample is sample
    assert g.next_token_probs is next_token_probs and llamanb.SamplingParams is SamplingParams
