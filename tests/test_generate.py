"""Sampling distributions (closed form) and the generation loop on the embedded model."""
from __future__ import annotations

import math

import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.generate import SamplingParams, generate, next_token_probs, sample


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


# ---- the generation loop on SmolLM2 ------------------------------------------------------------------
@pytest.fixture(scope="module")
def capital_case(reference_data):
    return next(c for c in reference_data["cases"] if c["name"] == "capital")


def test_stops_on_eos_with_reference_tokens(smollm_engine, capital_case):
    r = generate(smollm_engine, capital_case["prompt_ids"], 32, SamplingParams())
    assert r.stop_reason == "eos"
    assert r.ids == capital_case["greedy_ids"] and r.ids[-1] == 2
    assert r.text == "The capital of France is Paris."           # special tokens dropped
    assert r.decode_steps == len(r.ids) - 1
    assert r.prefill_s > 0 and r.decode_s > 0


def test_max_new_tokens_respected(smollm_engine, reference_data):
    case = next(c for c in reference_data["cases"] if c["name"] == "raw_list")
    for n in (1, 5):
        r = generate(smollm_engine, case["prompt_ids"], n, SamplingParams())
        assert len(r.ids) == n and r.stop_reason == "length" and r.decode_steps == n - 1
        assert r.ids == case["greedy_ids"][:n]


def test_custom_stop_ids(smollm_engine, capital_case):
    stop = capital_case["greedy_ids"][2]                          # stop on the 3rd greedy token
    r = generate(smollm_engine, capital_case["prompt_ids"], 32, SamplingParams(), stop_ids=[stop])
    assert r.ids == capital_case["greedy_ids"][:3] and r.stop_reason == "eos"


def test_streaming_concatenates_to_text(smollm, smollm_engine, reference_data):
    """Multi-byte characters (the French case) arrive whole; the pieces add up to result.text."""
    case = next(c for c in reference_data["cases"] if c["name"] == "french")
    pieces, ids = [], []
    r = generate(smollm_engine, case["prompt_ids"], 24, SamplingParams(),
                 on_token=lambda t, s: (ids.append(t), pieces.append(s)))
    assert "".join(pieces) == r.text
    assert all("\ufffd" not in p for p in pieces)
    assert r.text == smollm.tokenizer.decode([t for t in r.ids if t != 2], skip_special_tokens=True)
    assert set(ids) <= set(r.ids) and ids[-1] == r.ids[-1]


def test_top_k_1_sampling_equals_greedy_generation(smollm_engine, capital_case):
    greedy = generate(smollm_engine, capital_case["prompt_ids"], 6, SamplingParams())
    topk1 = generate(smollm_engine, capital_case["prompt_ids"], 6,
                     SamplingParams(temperature=1.3, top_k=1, seed=42))
    assert topk1.ids == greedy.ids


def test_seeded_sampling_is_reproducible(smollm_engine, capital_case):
    prompt = capital_case["prompt_ids"]
    runs = {seed: generate(smollm_engine, prompt, 6, SamplingParams(temperature=1.0, seed=seed)).ids
            for seed in (1, 2, 3)}
    assert generate(smollm_engine, prompt, 6, SamplingParams(temperature=1.0, seed=1)).ids == runs[1]
    assert len({tuple(v) for v in runs.values()}) > 1               # different seeds, different text


def test_generate_rejects_bad_input(smollm_engine):
    with pytest.raises(LlamanbError):
        generate(smollm_engine, [], 4)
    with pytest.raises(LlamanbError):
        generate(smollm_engine, [1, 2, 3], 0)
    with pytest.raises(LlamanbError):
        generate(smollm_engine, [5] * smollm_engine.config.max_seq, 4)   # no room left


def test_budget_capped_by_context(tmp_path):
    """A prompt one token short of the context gets exactly one new token."""
    from conftest import make_tiny_checkpoint

    from llamanb.engine import Engine
    from llamanb.io.store import load_model

    make_tiny_checkpoint(tmp_path / "ck", n_heads=4, n_kv_heads=2, tie=True, seed=0, max_position_embeddings=16)
    eng = Engine(load_model(tmp_path / "ck"))
    r = generate(eng, list(range(3, 18)), 10, SamplingParams(), stop_ids=[])
    assert len(r.ids) == 1 and r.stop_reason == "length"
