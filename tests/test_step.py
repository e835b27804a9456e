"""The batched, position-aware seam: one `Engine.step` for prefill, decode, chunks and mixes.

Every check compares the step against the same work done the old way, one sequence at a time.
Prefill rows must agree bit for bit (the engine pads every multi-row step to the backend's row
multiple, so each row's GEMM arithmetic is the same whatever else shares the step); a decode row
alone runs as a GEMV, which rounds differently from a GEMM row, so in the default engine it agrees
to float32 tolerance, and in a batch-invariant engine bit for bit.
"""
import numpy as np
import pytest

from llamanb import Engine
from llamanb.errors import LlamanbError
from llamanb.engine.numpy_backend import BLOCK_Q
from llamanb.engine.rows import padded
from llamanb.engine.step import PAD, Step

RNG = np.random.default_rng(7)
P0 = [int(t) for t in RNG.integers(3, 49152, 13)]
P1 = [int(t) for t in RNG.integers(3, 49152, 40)]
P2 = [int(t) for t in RNG.integers(3, 49152, 7)]


def _separately(eng):
    """Reference: each sequence alone, through the single-sequence API."""
    out = {}
    for name, ids in (("p0", P0), ("p1", P1)):
        cache = eng.new_cache(64)
        out[name] = (eng.prefill(ids, cache), cache)
    cache = eng.new_cache(64)
    first = eng.prefill(P2, cache)
    tok = int(np.argmax(first))
    out["p2"] = (eng.decode(tok, cache), cache)
    return out, tok


def _mixed(eng, tok):
    cache = eng.new_cache(64, slots=3)
    eng.prefill(P2, cache, slot=2)
    step = Step.build([(0, 0, P0), (1, 0, P1), (2, len(P2), [tok])])
    assert step.rows == len(P0) + len(P1) + 1 and list(step.logit_rows) == [12, 52, 53]
    logits = eng.step(step, cache)                                      # [3, V]
    return logits, cache


def test_mixed_step_equals_separate_runs(smollm, smollm_engine):
    ref, tok = _separately(smollm_engine)
    logits, cache = _mixed(smollm_engine, tok)
    assert list(cache.lengths) == [len(P0), len(P1), len(P2) + 1]
    for slot, name, n in ((0, "p0", len(P0)), (1, "p1", len(P1))):
        rc = ref[name][1]
        # K/V of prefilled prompts: bit for bit, every layer
        assert np.array_equal(cache.k_all[slot, :, :, :n], rc.k[:, :, :n])
        assert np.array_equal(cache.v_all[slot, :, :, :n], rc.v[:, :, :n])
        assert not cache.k_all[slot, :, :, n:].any()                    # nothing past the end
    # logits: the head runs 3 rows here and 1 row alone (different BLAS kernels)
    for row, name in enumerate(("p0", "p1", "p2")):
        np.testing.assert_allclose(logits[row], ref[name][0], rtol=0, atol=2e-4)
        assert np.argmax(logits[row]) == np.argmax(ref[name][0])
    # the decoding sequence: its new K/V row agrees to float32 tolerance
    np.testing.assert_allclose(cache.k_all[2, :, :, :len(P2) + 1], ref["p2"][1].k[:, :, :len(P2) + 1],
                               rtol=0, atol=1e-3)


def test_mixed_step_is_bit_exact_when_batch_invariant(smollm):
    eng = Engine(smollm, batch_invariant=True)
    ref, tok = _separately(eng)
    logits, cache = _mixed(eng, tok)
    for row, name in enumerate(("p0", "p1", "p2")):
        assert np.array_equal(logits[row], ref[name][0]), name
    assert np.array_equal(cache.k_all[2, :, :, :len(P2) + 1], ref["p2"][1].k[:, :, :len(P2) + 1])


def _bit_exact_chunk(backend) -> int:
    """The smallest chunk whose starts keep every row's bits: a multiple of the attention's query
    tile (so key tiles line up) and of the BLAS row alignment (llamanb.platform.blas.row_align)."""
    return int(np.lcm(BLOCK_Q, backend.row_align))


@pytest.mark.parametrize("times", [1, 2])
def test_chunked_prefill_equals_one_shot(smollm_engine, times):
    """A prompt of 2.5 chunks (each reading the earlier chunks from the cache) gives the same
    logits and cache, bit for bit, when chunk starts keep rows and key tiles aligned, and every
    chunk is padded to the row multiple."""
    chunk = times * _bit_exact_chunk(smollm_engine.backend)
    n = 5 * chunk // (2 * times)
    ids = [int(t) for t in np.random.default_rng(3).integers(3, 49152, n)]
    one = smollm_engine.new_cache(n + 8)
    ref = smollm_engine.prefill(ids, one)
    parts = smollm_engine.new_cache(n + 8)
    got = smollm_engine.prefill(ids, parts, chunk=chunk)
    assert parts.length == one.length == n
    assert np.array_equal(got, ref)
    assert np.array_equal(parts.k[:, :, :n], one.k[:, :, :n])
    assert np.array_equal(parts.v[:, :, :n], one.v[:, :, :n])


def test_unaligned_chunks_agree_within_rounding(smollm_engine):
    """Any chunk size gives the same answer up to float32 reordering."""
    ids = [int(t) for t in np.random.default_rng(3).integers(3, 49152, 300)]
    ref = smollm_engine.prefill(ids, smollm_engine.new_cache(320))
    got = smollm_engine.prefill(ids, smollm_engine.new_cache(320), chunk=100)
    assert np.argmax(got) == np.argmax(ref)
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-3 * np.abs(ref).max())


def test_chunked_collect_matches(smollm_engine):
    chunk = _bit_exact_chunk(smollm_engine.backend)
    n = chunk + chunk // 2
    ids = [int(t) for t in np.random.default_rng(4).integers(3, 49152, n)]
    a, b = [], []
    smollm_engine.prefill(ids, smollm_engine.new_cache(n), collect=a)
    smollm_engine.prefill(ids, smollm_engine.new_cache(n), collect=b, chunk=chunk)
    assert len(a) == len(b) == 31
    assert all(x.shape == (n, 576) and np.array_equal(x, y) for x, y in zip(a, b))


def test_attention_reads_only_its_own_sequence(smollm_engine):
    """Two different prompts side by side in one step, and the same prompt next to itself:
    slot 0's result must not depend on what slot 1 holds."""
    eng = smollm_engine
    c1 = eng.new_cache(64, slots=2)
    l1 = eng.step(Step.build([(0, 0, P0), (1, 0, P1)]), c1)
    c2 = eng.new_cache(64, slots=2)
    l2 = eng.step(Step.build([(0, 0, P0), (1, 0, P0[::-1] + P0)]), c2)
    assert np.array_equal(l1[0], l2[0])
    assert np.array_equal(c1.k_all[0], c2.k_all[0])


def test_free_slot_is_reused(smollm_engine):
    eng = smollm_engine
    cache = eng.new_cache(64, slots=2)
    eng.step(Step.build([(0, 0, P0), (1, 0, P1)]), cache)
    cache.free(1)
    assert cache.lengths[1] == 0 and not cache.k_all[1].any()
    again = eng.prefill(P0, cache, slot=1)
    alone = eng.prefill(P0, eng.new_cache(64))
    assert np.array_equal(again, alone)


def test_padding_rows_never_touch_the_cache(smollm_engine):
    step = padded(Step.build([(0, 0, P0)]), 24, pad_id=2)
    assert step.rows == 24 and (step.slots[13:] == PAD).all() and step.real_rows == 13
    cache = smollm_engine.new_cache(64)
    smollm_engine.step(step, cache)
    assert cache.length == 13 and not cache.k[:, :, 13:].any()


def test_step_misuse(smollm_engine):
    eng = smollm_engine
    cache = eng.new_cache(16, slots=2)
    with pytest.raises(LlamanbError, match="appears twice"):
        Step.build([(0, 0, [5]), (0, 1, [6])])
    with pytest.raises(LlamanbError, match="continues it at 3"):
        eng.step(Step.build([(0, 3, [5])]), cache)                     # slot 0 is empty
    with pytest.raises(LlamanbError, match="slot 2 outside"):
        eng.step(Step.build([(2, 0, [5])]), cache)
    with pytest.raises(LlamanbError, match="exceeds"):
        eng.step(Step.build([(1, 0, list(range(3, 20)))]), cache)      # 17 > 16 positions
    with pytest.raises(LlamanbError, match="at least one"):
        Step.build([])
    with pytest.raises(LlamanbError, match="out of range"):
        eng.step(Step.build([(0, 0, [49152])]), cache)
    assert list(cache.lengths) == [0, 0]                               # nothing half-done


@pytest.mark.parametrize("call", [
    lambda eng, m: Engine("SmolLM2"),
    lambda eng, m: Engine(m, backend=3),
    lambda eng, m: eng.new_cache(-5),
    lambda eng, m: eng.new_cache(2.5),
    lambda eng, m: eng.new_cache(16, slots=0),
    lambda eng, m: eng.prefill("Hello", eng.new_cache(16)),
    lambda eng, m: eng.prefill([1.5, 2.0], eng.new_cache(16)),
    lambda eng, m: eng.prefill([1, 2], eng.new_cache(16), chunk=0),
    lambda eng, m: eng.prefill([1, 2], eng.new_cache(16), real_len=True),
])
def test_engine_api_misuse(smollm, smollm_engine, call):
    with pytest.raises(LlamanbError):
        call(smollm_engine, smollm)


def test_compiled_lengths_pad_with_eos_and_chunk(smollm, monkeypatch):
    """A backend compiled for fixed lengths: the engine pads each chunk to the smallest that
    fits (with EOS rows that never reach the cache) and splits longer prompts."""
    eng = Engine(smollm)
    seen = []
    real_layers = eng.backend.layers

    def spy(x, step, cache, collect=None):
        seen.append((step.rows, step.real_rows, int(step.ids[-1])))
        return real_layers(x, step, cache, collect)

    monkeypatch.setattr(eng.backend, "layers", spy)
    q = int(np.lcm(_bit_exact_chunk(eng.backend), eng.backend.row_multiple))   # lengths the
    monkeypatch.setattr(eng.backend, "prefill_lengths", (q, 2 * q))             # rows stay exact at
    n = 2 * q + 44
    ids = [int(t) for t in np.random.default_rng(5).integers(3, 49152, n)]
    cache = eng.new_cache(n + 8)
    got = eng.prefill(ids, cache)
    eos = smollm.config.eos_ids[0]
    assert seen == [(2 * q, 2 * q, ids[2 * q - 1]), (q, 44, eos)]   # chunk 2q, then 44 -> q rows
    ref = Engine(smollm).prefill(ids, Engine(smollm).new_cache(n + 8), chunk=2 * q)
    assert np.array_equal(got, ref) and cache.length == n
