"""The generation loop on the embedded model: generate, stream (text pieces, the U+FFFD hold-back),
the token loop. The sampler's own tests are in test_sampling.py."""
from __future__ import annotations

import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.engine.generate import generate, stream, token_loop
from llamanb.engine.sampling import Sampler, SamplingParams


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

    from llamanb.engine.engine import Engine
    from llamanb.io.store import load_model

    make_tiny_checkpoint(tmp_path / "ck", n_heads=4, n_kv_heads=2, tie=True, seed=0, max_position_embeddings=16)
    eng = Engine(load_model(tmp_path / "ck"))
    r = generate(eng, list(range(3, 18)), 10, SamplingParams(), stop_ids=[])
    assert len(r.ids) == 1 and r.stop_reason == "length"


# ---- stream: one event per token, text held back inside a UTF-8 character ----------------------------
class Scripted(Sampler):
    """A sampler that picks the given ids in turn (the model still runs every step)."""

    def __init__(self, ids):
        super().__init__(SamplingParams())
        self.script = iter(ids)

    def __call__(self, logits, history=()):
        return next(self.script)


def test_stream_holds_back_a_split_character(smollm, smollm_engine):
    """'😀 ok' is three byte-level tokens for the emoji's four UTF-8 bytes, then ' ok': the first
    two end inside the character (the tokenizer decodes them to U+FFFD), so their pieces are held
    back; the third completes it. The pieces joined are the tokenizer's decode of all ids."""
    tok = smollm.tokenizer
    ids = tok.encode("😀 ok")
    partial = [tok.decode(ids[:i + 1]) for i in range(len(ids))]
    assert partial[0].endswith("\ufffd") and not partial[-1].endswith("\ufffd")   # the split is real
    prompt = tok.encode_prompt("Hi")
    events = list(stream(smollm_engine, prompt, len(ids), stop_ids=[], sampler=Scripted(ids)))
    assert [e.id for e in events] == ids
    pieces = [e.piece for e in events]
    assert [p is None for p in pieces] == [d.endswith("\ufffd") for d in partial]
    assert "".join(p for p in pieces if p is not None) == tok.decode(ids)
    assert all("\ufffd" not in p for p in pieces if p is not None)


def test_stream_equals_generate_and_reads_lazily(smollm, smollm_engine, capital_case):
    """stream's events are generate's tokens and logits; a reader that stops early stops the model
    (token_loop advances only when the next token is asked for)."""
    prompt = capital_case["prompt_ids"]
    ref = generate(smollm_engine, prompt, 4, keep_logits=True)
    events = list(stream(smollm_engine, prompt, 4, text=False))
    assert [e.id for e in events] == ref.ids and all(e.piece is None for e in events)
    assert all(np.array_equal(e.logits, lg) for e, lg in zip(events, ref.logits))
    calls = []
    first = np.zeros(5, np.float32)
    first[2] = 1
    loop = token_loop(first, lambda t: calls.append(t) or first, Sampler(), budget=10)
    assert next(loop)[0] == 2 and calls == []                  # nothing run past what was read
    assert next(loop)[0] == 2 and calls == [2]
    loop.close()
    assert [t for t, _ in token_loop(first, lambda t: first, Sampler(), 10, stop={2})] == [2]


def test_stream_continues_a_cache(smollm_engine, capital_case):
    """A cache already holding the prompt's first positions: only the rest is prefilled, and the
    tokens are those of a fresh prefill; a cache that does not hold them is refused."""
    prompt = capital_case["prompt_ids"]
    cache = smollm_engine.new_cache(len(prompt) + 3)
    smollm_engine.prefill(prompt[:5], cache)
    got = [e.id for e in stream(smollm_engine, prompt, 3, stop_ids=[], cache=cache, cached=5)]
    assert got == generate(smollm_engine, prompt, 3, stop_ids=[]).ids
    with pytest.raises(LlamanbError, match="the cache holds 0 positions"):
        stream(smollm_engine, prompt, 3, cache=smollm_engine.new_cache(64), cached=5)
