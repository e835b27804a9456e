"""KVStore.truncate on every storage: cutting a slot back to n positions leaves the store exactly
as if only those n positions had ever been written (checked against a fresh store written with
them alone), and refuses to lengthen."""
import numpy as np
import pytest

from llamanb.model.config import SMOLLM2_135M
from llamanb.errors import LlamanbError
from llamanb.engine.kv.contiguous import KVCache
from llamanb.engine.kv.paged import PagedKVCache
from llamanb.engine.step import Step

CFG = SMOLLM2_135M.replace(n_layers=2, n_heads=4, n_kv_heads=2, head_dim=4)
STORES = {
    "contiguous": lambda: KVCache(CFG, 40, slots=2, position_multiple=8),
    "paged": lambda: PagedKVCache(CFG, 40, n_blocks=9, block=8, slots=2),
}


def fill(cache, slot, kv, n):
    """Positions 0 .. n-1 of slot from kv (as a step would: reserve, write per layer, advance)."""
    step = Step.build([(slot, int(cache.lengths[slot]), np.zeros(n - int(cache.lengths[slot]), np.int64))])
    cache.admit(step)
    start = step.segments[0].start
    for layer in range(CFG.n_layers):
        cache.write(layer, slot, start, kv[layer, 0, start:n], kv[layer, 1, start:n])
    cache.advance(step)


def state(cache):
    arrays = (cache.k_all, cache.v_all) if isinstance(cache, KVCache) else (cache.k_pool, cache.v_pool)
    extra = ([list(t) for t in cache.tables], list(cache.free_blocks)) if isinstance(cache, PagedKVCache) else ()
    return [a.copy() for a in arrays], cache.lengths.tolist(), extra


@pytest.mark.parametrize("kind", STORES)
@pytest.mark.parametrize("n, keep", [(37, 20), (37, 16), (16, 16), (9, 0), (37, 1)])
def test_truncate_equals_writing_only_the_kept_positions(kind, n, keep):
    rng = np.random.default_rng(n * 100 + keep)
    kv = [rng.standard_normal((CFG.n_layers, 2, 40, CFG.n_kv_heads, CFG.head_dim)).astype(np.float32)
          for _ in range(2)]
    cut, fresh = STORES[kind](), STORES[kind]()
    for c, n0 in ((cut, n), (fresh, keep)):
        fill(c, 1, kv[1], 23)                                 # a neighbour that must not move
        if n0:
            fill(c, 0, kv[0], n0)
    cut.truncate(0, keep)
    got, want = state(cut), state(fresh)
    assert got[1] == want[1] and got[2] == want[2]
    for a, b in zip(got[0], want[0]):
        np.testing.assert_array_equal(a, b)
    # and it goes on like the fresh one: the same next positions, the same reads
    for c in (cut, fresh):
        fill(c, 0, kv[0], keep + 5)
    for layer in range(CFG.n_layers):
        np.testing.assert_array_equal(cut.keys(layer, 0, 40), fresh.keys(layer, 0, 40))
        np.testing.assert_array_equal(cut.values(layer, 0, keep + 5), fresh.values(layer, 0, keep + 5))


@pytest.mark.parametrize("kind", STORES)
def test_truncate_refuses_to_lengthen_in_one_line(kind):
    cache = STORES[kind]()
    fill(cache, 0, np.ones((CFG.n_layers, 2, 40, CFG.n_kv_heads, CFG.head_dim), np.float32), 6)
    for bad in (7, -1, 2.5, True):
        with pytest.raises(LlamanbError, match="slot 0 holds 6 positions") as info:
            cache.truncate(0, bad)
        assert "\n" not in str(info.value)
    with pytest.raises(LlamanbError, match="slot 3 outside"):
        cache.truncate(3, 0)
    assert cache.lengths.tolist() == [6, 0]
