"""Speed of the emulation without changing its numbers: a weight buffer written once is checked for
bfloat16 values once (when frozen), not by every kernel call; unrounded weights are still rounded
on every call; a buffer written again is checked again. Checks are counted by wrapping the check,
results compared with float64 numpy and with the unfrozen path bit for bit."""
from __future__ import annotations

import numpy as np
import pytest

import llamanb
from llamanb.engine.engine import Engine
from llamanb.npu.compiler import extern
from llamanb.npu.compiler.builders import gemv
from llamanb.npu.runtime.kernel_cache import KernelCache
from llamanb.npu.runtime.devices import TO_DEVICE, EmulatedDevice
from llamanb.model.numerics import to_bf16

M, K = 16, 32


@pytest.fixture
def checked(monkeypatch):
    """Every array the extern models check for bf16 values, in order."""
    seen = []
    real = extern._is_bf16

    def spy(a):
        seen.append(a)
        return real(a)
    monkeypatch.setattr(extern, "_is_bf16", spy)
    return seen


@pytest.fixture
def kc(tmp_path):
    kc = KernelCache(EmulatedDevice(execute="model"), root=tmp_path)
    kc.compile_and_cache("gemv", gemv(M, K), {"k": K})
    return kc


def rand(shape, seed):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def run(kc, x):
    return kc.call("gemv", None, x, np.zeros(M, np.float32), bo_key="L0")[2]


def assert_within_one_ulp(y, ref64):
    ulp = np.abs(to_bf16(ref64.astype(np.float32)).astype(np.float64)) * 2.0 ** -7
    assert np.all(np.abs(y - ref64) <= ulp + 1e-30)


def test_a_frozen_weight_is_checked_once(kc, checked):
    a = to_bf16(rand((M, K), 0))
    kc.preload("gemv", {0: a}, bo_key="L0")
    bo = kc.buffers("gemv", "L0")[0]
    assert extern.is_marked_bf16(bo.device_array) and not bo.device_array.flags.writeable
    assert sum(c.size == a.size for c in checked) == 1           # the one check, at preload
    del checked[:]
    xs = [to_bf16(rand(K, s)) for s in (1, 2, 3)]
    ys = [run(kc, x) for x in xs]
    assert not any(c.size == a.size for c in checked)            # the weight: never again
    assert len(checked) == len(xs)                               # the activation: every call
    for x, y in zip(xs, ys):
        assert np.array_equal(y, extern.model("matvec_bf16")(a.copy(), x))   # unfrozen path
        assert_within_one_ulp(y, a.astype(np.float64) @ x.astype(np.float64))


def test_unrounded_weights_are_not_marked_and_still_rounded(kc, checked):
    raw = rand((M, K), 4)
    assert np.any(raw.view(np.uint32) & 0xFFFF)                  # not bf16 values
    kc.preload("gemv", {0: raw}, bo_key="L0")
    assert not extern.is_marked_bf16(kc.buffers("gemv", "L0")[0].device_array)
    x = to_bf16(rand(K, 5))
    del checked[:]
    ys = [run(kc, x) for _ in range(2)]
    assert sum(c.size == raw.size for c in checked) == 2         # checked (and rounded) each call
    for y in ys:
        assert np.array_equal(y, extern.model("matvec_bf16")(to_bf16(raw), x))


def test_a_weight_written_again_is_checked_again(kc, checked):
    a, b = to_bf16(rand((M, K), 6)), rand((M, K), 7)
    kc.preload("gemv", {0: a}, bo_key="L0")
    bo = kc.buffers("gemv", "L0")[0]
    bo.map()[...] = b                                            # not bf16 values this time
    bo.sync(TO_DEVICE)
    assert bo.device_array.flags.writeable and not extern.is_marked_bf16(bo.device_array)
    x = to_bf16(rand(K, 8))
    assert np.array_equal(run(kc, x), extern.model("matvec_bf16")(to_bf16(b), x))
    kc.preload("gemv", {0: b}, bo_key="L0")                      # frozen again, unrounded values
    assert not bo.device_array.flags.writeable and not extern.is_marked_bf16(bo.device_array)
    assert np.array_equal(run(kc, x), extern.model("matvec_bf16")(to_bf16(b), x))


def test_mark_refuses_what_could_change_or_is_not_bf16():
    a = to_bf16(rand((4, 8), 9))
    assert not extern.mark_bf16(a)                               # writeable
    v = a[:2]
    v.flags.writeable = False
    assert not extern.mark_bf16(v)                               # a view: its base may change
    a.flags.writeable = False
    assert extern.mark_bf16(a) and extern.is_marked_bf16(a)
    a.flags.writeable = True
    assert not extern.is_marked_bf16(a)
    r = rand((4, 8), 10)
    r.flags.writeable = False
    assert not extern.mark_bf16(r)                               # not bf16 values


def test_decode_never_rechecks_the_backend_weights(checked, tmp_path):
    from conftest import make_tiny_checkpoint
    make_tiny_checkpoint(tmp_path, n_heads=6, n_kv_heads=2, tie=True)
    model = llamanb.load_model(tmp_path)
    eng = Engine(model, "npu2-emulated")
    b = eng.backend
    weights = [bo for (name, _), bos in b.kc._bos.items()
               for bo, a in zip(bos, b.groups[name].spec.args) if a.role == "weight"
               and not a.name.startswith("lut")]
    assert weights and all(extern.is_marked_bf16(bo.device_array) for bo in weights)
    ids = {id(bo.device_array) for bo in weights}
    cache = eng.new_cache(256)
    eng.prefill([1, 5, 9], cache)
    del checked[:]
    eng.decode(3, cache)
    assert checked and not any(id(c) in ids for c in checked)


def test_exp_f32_shortcut_equals_its_general_path():
    """exp_f32 skips its clamping branches when no value needs them; a NaN appended forces them:
    the shared values must come out bit for bit the same."""
    rng = np.random.default_rng(11)
    x = np.concatenate([rng.uniform(-87.3, 88.7, 50_000), rng.standard_normal(50_000) * 8,
                        [0.0, -0.0, 88.0, -87.0]]).astype(np.float32)
    fast = extern.exp_f32(x)
    general = extern.exp_f32(np.append(x, np.float32(np.nan)))[:-1]
    assert np.array_equal(fast.view(np.uint32), general.view(np.uint32))
    assert np.allclose(fast, np.exp(x.astype(np.float64)), rtol=2e-7, atol=0)
