"""KernelCache: the disk cache (hit, stale, corrupt), the index sets and bo_key measured by the
bytes each call moves, the role-derived call, and the errors. Byte counts are derived from the
argument shapes; results are compared with float64 numpy."""
from __future__ import annotations

import json

import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.npu.compiler.builders import gemv, rmsnorm
from llamanb.npu.runtime.kernel_cache import KernelCache
from llamanb.npu.runtime.devices import EmulatedDevice
from llamanb.model.numerics import to_bf16

M, K = 16, 32


@pytest.fixture
def kc(tmp_path):
    kc = KernelCache(EmulatedDevice(), root=tmp_path)
    kc.compile_and_cache("gemv", gemv(M, K), {"k": K})
    return kc


def arrays(seed=0):
    rng = np.random.default_rng(seed)
    a = to_bf16(rng.standard_normal((M, K)).astype(np.float32))
    x = to_bf16(rng.standard_normal(K).astype(np.float32))
    return a, x, np.zeros(M, np.float32)


def test_disk_cache_hit_stale_and_corrupt(tmp_path, kc):
    m = json.loads((tmp_path / "gemv" / "manifest.json").read_text())
    assert m["emulated"] is True and m["toolchain"]["emulated"] is True
    assert [a["role"] for a in m["args"]] == ["weight", "input", "output"]
    kc.compile_and_cache("gemv", gemv(M, K), {"k": K})
    assert kc.stats["disk_hits"] == 1 and kc.stats["builds"] == 1
    kc.compile_and_cache("gemv", gemv(M, K), {"k": K, "opt": 2})        # new kwargs: stale
    assert kc.stats["stale_rebuilt"] == 1 and kc.stats["builds"] == 2
    (tmp_path / "gemv" / "manifest.json").write_text("{not json")
    with pytest.raises(LlamanbError, match="corrupt"):
        KernelCache(EmulatedDevice(), root=tmp_path).load("gemv")
    kc.compile_and_cache("gemv", gemv(M, K), {"k": K})
    assert kc.stats["corrupt_rebuilt"] == 1 and "corrupt" in kc.messages[-1]
    fresh = KernelCache(EmulatedDevice(), root=tmp_path)                  # a new process
    a, x, y = arrays()
    out = fresh.call("gemv", a, x, y)
    np.testing.assert_allclose(out[2], a.astype(np.float64) @ x, rtol=2 ** -7, atol=1e-6)
    assert not list(tmp_path.glob(".gemv-*"))                            # no temp dirs left


def test_index_sets_and_bo_key_by_bytes_moved(kc):
    a, x, y = arrays()
    c = kc.device.counters
    w_bytes, x_bytes, y_bytes = M * K * 2, K * 2, M * 2
    kw = dict(output_indices=[2], static_input_indices={0}, bo_key="L0")
    before = c.copy()
    out = kc.load_and_run("gemv", {"k": K}, a, x, y, **kw)
    first = c - before
    assert first.bytes_to_device == w_bytes + x_bytes and first.bytes_from_device == y_bytes
    assert [o.size for o in out] == [0, 0, M] and len(out) == 3
    before = c.copy()
    x2 = arrays(1)[1]
    out2 = kc.load_and_run("gemv", {"k": K}, a, x2, y, **kw)
    later = c - before
    assert later.bytes_to_device == x_bytes and later.dispatches == 1
    np.testing.assert_allclose(out2[2], a.astype(np.float64) @ x2, rtol=2 ** -7, atol=1e-6)
    before = c.copy()
    kc.load_and_run("gemv", {"k": K}, a, x, y, output_indices=[2], static_input_indices={0},
                    bo_key="L1")                                         # another layer's set
    assert (c - before).bytes_to_device == w_bytes + x_bytes
    assert kc.resident_bytes() == 2 * (w_bytes + x_bytes + y_bytes)
    before = c.copy()
    out = kc.load_and_run("gemv", {"k": K}, a, x, y)       # no sets: write all, read the last
    every = c - before
    assert every.bytes_to_device == w_bytes + x_bytes + y_bytes
    assert every.bytes_from_device == y_bytes and [o.size for o in out] == [0, 0, M]


def test_named_call_derives_the_sets_from_roles(kc):
    a, x, y = arrays()
    explicit = kc.load_and_run("gemv", None, a, x, y, output_indices=[2],
                               static_input_indices={0}, bo_key="e")
    before = kc.device.counters.copy()
    named = kc.call("gemv", a, x, y, bo_key="n")
    assert (kc.device.counters - before).bytes_to_device == (M * K + K) * 2
    assert all(np.array_equal(p, q) for p, q in zip(explicit, named))


def test_preload_writes_weights_before_the_first_call(kc):
    a, x, y = arrays()
    kc.preload("gemv", {0: a}, bo_key="L0")
    before = kc.device.counters.copy()
    kc.call("gemv", None, x, y, bo_key="L0")          # weight slot already resident
    assert (kc.device.counters - before).bytes_to_device == K * 2


def test_rmsnorm_through_the_cache_matches_float64(tmp_path):
    kc = KernelCache(EmulatedDevice(), root=tmp_path)
    spec = rmsnorm(8, 64, 1e-5)
    kc.compile_and_cache("rms", spec)
    rng = np.random.default_rng(2)
    x = to_bf16(rng.standard_normal(8 * 64).astype(np.float32))
    w = to_bf16(rng.standard_normal(64).astype(np.float32))
    y = kc.call("rms", x, w, np.zeros((8, 64), np.float32))[2]
    x64 = x.reshape(8, 64).astype(np.float64)
    ref = x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(y, ref, rtol=2 ** -7, atol=1e-6)


def test_bad_calls(kc):
    a, x, y = arrays()
    with pytest.raises(LlamanbError, match="unknown kernel 'nope'"):
        kc.load_and_run("nope", None, a)
    with pytest.raises(LlamanbError, match="takes 3 arrays"):
        kc.load_and_run("gemv", None, a, x)
    with pytest.raises(LlamanbError, match=r"argument 1 \(x\) must be a float32 array of shape"):
        kc.load_and_run("gemv", None, a, x[:-1], y)
    with pytest.raises(LlamanbError, match="float32"):
        kc.load_and_run("gemv", None, a, x.astype(np.float64), y)
    with pytest.raises(LlamanbError, match="index 3 is out of range"):
        kc.load_and_run("gemv", None, a, x, y, output_indices=[3])
    with pytest.raises(LlamanbError, match="KernelSpec"):
        kc.compile_and_cache("g2", "module text", {})
    with pytest.raises(LlamanbError, match="JSON"):
        kc.compile_and_cache("g3", gemv(M, K), {"f": object()})


def test_real_entry_keeps_the_elf_and_its_kernel_name(tmp_path, monkeypatch):
    """A real build (contract fakes of mlir-air and Peano): the entry holds <name>.elf and the
    kernel name "main:<func>" the XRTCompileArtifact carried, and the device is handed those."""
    import npu_fakes

    from llamanb.npu.runtime.devices import ElfArtifact

    monkeypatch.setenv("LLAMANB_CACHE", str(tmp_path / "c"))
    npu_fakes.install(monkeypatch, tmp_path)
    loaded = []

    class Device:
        emulated = False
        counters = None

        def kernel(self, artifact):
            loaded.append(artifact)
            return object()

    kc = KernelCache(Device(), root=tmp_path / "cache")
    kc.compile_and_cache("gemv", gemv(M, K), {})
    m = json.loads((tmp_path / "cache" / "gemv" / "manifest.json").read_text())
    assert m["emulated"] is False and m["elf"] == "gemv.elf" and m["kernel"] == "main:gemv"
    assert isinstance(loaded[0], ElfArtifact) and loaded[0].kernel == "main:gemv"
    assert loaded[0].output_binary == str(tmp_path / "cache" / "gemv" / "gemv.elf")
    (tmp_path / "cache" / "gemv" / "gemv.elf").unlink()          # a real entry without its ELF
    kc2 = KernelCache(Device(), root=tmp_path / "cache")
    kc2.compile_and_cache("gemv", gemv(M, K), {})
    assert kc2.stats["corrupt_rebuilt"] == 1
