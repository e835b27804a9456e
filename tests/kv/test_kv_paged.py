"""The paged KV store behind the same protocol: the backend's attention code is unchanged, and a
paged run must equal a contiguous one bit for bit (reads gather the blocks into the same array)."""
import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.engine.kv.paged import PagedKVCache
from llamanb.engine.step import Step

RNG = np.random.default_rng(11)
A = [int(t) for t in RNG.integers(3, 49152, 150)]     # crosses two 64-position blocks
B = [int(t) for t in RNG.integers(3, 49152, 9)]


def test_paged_equals_contiguous(smollm_engine):
    eng = smollm_engine
    flat = eng.new_cache(256, slots=2)
    paged = eng.new_cache(256, slots=2, block=64, n_blocks=8)
    assert isinstance(paged, PagedKVCache)
    outs = []
    for cache in (flat, paged):
        first = eng.step(Step.build([(0, 0, A), (1, 0, B)]), cache)                    # [2, V]
        toks = [int(np.argmax(r)) for r in first]
        nxt = eng.step(Step.build([(0, len(A), [toks[0]]), (1, len(B), [toks[1]])]), cache)
        outs.append((first, nxt))
    assert all(np.array_equal(a, b) for a, b in zip(outs[0], outs[1]))
    for layer in (0, 29):
        for slot, n in ((0, 151), (1, 10)):
            assert np.array_equal(paged.keys(layer, slot, 256), flat.keys(layer, slot, 256))
            assert np.array_equal(paged.values(layer, slot, n), flat.values(layer, slot, n))
    # blocks on demand: 151 positions -> 3 blocks, 10 -> 1 block; 4 of 8 left
    assert [len(t) for t in paged.tables] == [3, 1] and len(paged.free_blocks) == 4
    assert paged.bytes_in_use == paged.nbytes // 2


def test_out_of_blocks_is_refused_before_anything_is_written(smollm_engine):
    eng = smollm_engine
    cache = eng.new_cache(256, slots=2, block=64, n_blocks=3)
    eng.prefill(A, cache, slot=0)                          # 150 positions: 3 blocks, pool empty
    assert cache.free_blocks == []
    before = cache.k_pool.copy()
    with pytest.raises(LlamanbError, match="out of blocks"):
        eng.prefill(B, cache, slot=1)
    assert cache.lengths[1] == 0 and cache.tables[1] == [] and np.array_equal(cache.k_pool, before)
    cache.free(0)                                          # a finished sequence returns its blocks
    assert len(cache.free_blocks) == 3 and not cache.k_pool.any()
    alone = eng.prefill(B, eng.new_cache(64))
    assert np.array_equal(eng.prefill(B, cache, slot=1), alone)


def test_block_arithmetic_closed_form(smollm):
    c = PagedKVCache(smollm.config, 300, n_blocks=10, block=16, slots=3)
    assert c.blocks_needed(0, 1) == 1 and c.blocks_needed(0, 16) == 1 and c.blocks_needed(0, 17) == 2
    assert c.can_hold({0: 160}) and not c.can_hold({0: 161})
    k = np.arange(20 * 3 * 64, dtype=np.float32).reshape(20, 3, 64)
    c.reserve({2: 20})
    c.write(5, 2, 0, k, -k)
    got = c.keys(5, 2, 20)                                  # [N_kv, 20, d]
    assert np.array_equal(got, k.transpose(1, 0, 2)) and np.array_equal(c.values(5, 2, 20), -got)
    assert c.tables[2] == [0, 1]
