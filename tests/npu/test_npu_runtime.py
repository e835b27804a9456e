"""The NPU runtime: buffer objects, syncs and dispatches on the emulated NPU2, and the pyxrt path
driven by a fake pyxrt module. References: float64 numpy and byte counts from the shapes."""
from __future__ import annotations

import types

import json

import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.npu.runtime import devices as runtime
from llamanb.npu.compiler.builders import gemv
from llamanb.npu.runtime.devices import FROM_DEVICE, TO_DEVICE, EmulatedDevice, XrtDevice
from llamanb.model.numerics import to_bf16


def test_sync_really_copies_and_counts_bf16_bytes():
    dev = EmulatedDevice()
    bo = dev.alloc((4, 8), "x")
    runtime.write(bo, np.arange(32, dtype=np.float32), dev.counters)
    assert not bo.device_array.any()                   # not on the device before a sync
    bo.sync(TO_DEVICE)
    assert np.array_equal(bo.device_array.reshape(-1), np.arange(32))
    bo.map()[...] = 0
    bo.sync(FROM_DEVICE)
    assert np.array_equal(bo.map().reshape(-1), np.arange(32))
    c = dev.counters
    assert (c.bytes_to_device, c.bytes_from_device, c.host_memcpys) == (4 * 8 * 2, 4 * 8 * 2, 1)


def test_emulated_run_matches_float64_and_is_charged_an_estimate():
    m, k = 16, 32
    spec = gemv(m, k)
    rng = np.random.default_rng(0)
    a = to_bf16(rng.standard_normal((m, k)).astype(np.float32))
    x = to_bf16(rng.standard_normal(k).astype(np.float32))
    dev = EmulatedDevice()
    kern = dev.kernel(spec)
    bos = [dev.alloc(arg.shape, arg.name) for arg in spec.args]
    for bo, arr in zip(bos[:2], (a, x)):
        runtime.write(bo, arr, dev.counters)
        bo.sync(TO_DEVICE)
    dev.run(kern, bos)
    bos[2].sync(FROM_DEVICE)
    ref = a.astype(np.float64) @ x.astype(np.float64)
    np.testing.assert_allclose(bos[2].map(), ref, rtol=2 ** -7, atol=1e-6)   # one bf16 rounding
    c = dev.counters
    assert c.dispatches == 1
    assert c.bytes_to_device == (m * k + k) * 2 and c.bytes_from_device == m * 2
    assert c.estimated_s >= 100e-6                     # at least one dispatch's overhead
    assert "estimated" in str(c) and "not measured" in str(c)


def test_bad_calls_are_clear_errors():
    dev = EmulatedDevice()
    with pytest.raises(LlamanbError, match="sync direction"):
        dev.alloc((2,)).sync("sideways")
    with pytest.raises(LlamanbError, match="shape"):
        dev.alloc((0, 3))
    with pytest.raises(LlamanbError, match="holds 4 values"):
        runtime.write(dev.alloc((4,)), np.zeros(5, np.float32), dev.counters)
    spec = gemv(8, 8)
    with pytest.raises(LlamanbError, match="takes 3 buffers"):
        dev.run(dev.kernel(spec), [dev.alloc((8, 8))])


def test_package_imports_without_pyxrt(monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "pyxrt", None)          # import pyxrt -> ImportError
    assert runtime.have_pyxrt() is False
    with pytest.raises(LlamanbError, match="npu2-emulated"):
        XrtDevice()


def test_xrt_path_with_the_contract_fake(tmp_path):
    """One ELF group through XrtDevice and the pyxrt contract fake (tests/npu/npu_fakes.py): bf16
    packing round-trips, every slot is bound, the result equals float64 numpy within bf16
    rounding."""
    import npu_fakes

    log = []
    dev = XrtDevice(xrt=npu_fakes.make_pyxrt(log))
    spec = gemv(16, 64)
    elf = tmp_path / "gemv.elf"
    elf.write_bytes(npu_fakes.ELF_MAGIC + json.dumps({"kernels": ["main:gemv"],
                                                      "module": spec.text}).encode())
    kern = dev.kernel(runtime.ElfArtifact("gemv", str(elf), "main:gemv", spec))
    bos = [dev.alloc(a.shape, a.name) for a in spec.args]
    rng = np.random.default_rng(0)
    A = to_bf16(rng.standard_normal((16, 64)).astype(np.float32))
    x = to_bf16(rng.standard_normal(64).astype(np.float32))
    for bo, arr in zip(bos, (A, x)):
        runtime.write(bo, arr, dev.counters)
        bo.sync(TO_DEVICE)
    dev.run(kern, bos)
    bos[2].sync(FROM_DEVICE)
    want = A.astype(np.float64) @ x
    # float32 accumulation then one bf16 rounding: |err| <= 2^-8 |y| + gamma_64 sum|a||x|
    bound = 2.0 ** -8 * np.abs(want) + 64 * 2.0 ** -24 * (np.abs(A) @ np.abs(x)) * 1.01
    assert np.all(np.abs(bos[2].map() - want) <= bound)
    assert [e[0] for e in log[-6:]] == ["set_arg"] * 3 + ["start", "wait", "sync"]
    assert dev.counters.dispatches == 1 and dev.counters.bytes_to_device == (16 * 64 + 64) * 2
    with pytest.raises(LlamanbError, match="takes 3 buffers"):
        dev.run(kern, bos[:2])
