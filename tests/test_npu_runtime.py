"""The NPU runtime: buffer objects, syncs and dispatches on the emulated NPU2, and the pyxrt path
driven by a fake pyxrt module. References: float64 numpy and byte counts from the shapes."""
from __future__ import annotations

import types

import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.npu import runtime
from llamanb.npu.builders import gemv
from llamanb.npu.runtime import FROM_DEVICE, TO_DEVICE, EmulatedDevice, XrtDevice
from llamanb.numerics import to_bf16


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


def fake_pyxrt(log):
    """A stand-in for pyxrt with the calls XrtDevice makes, recording them."""
    class bo:
        host_only, cacheable = "host_only", "cacheable"

        def __init__(self, device, nbytes, flags, group):
            self.buf = bytearray(nbytes)
            self.device_copy = bytes(nbytes)
            log.append(("bo", nbytes, flags, group))

        def map(self):
            return memoryview(self.buf)

        def write(self, data, offset):
            self.buf[offset:offset + len(data)] = data

        def sync(self, direction):
            log.append(("sync", direction))
            if direction == "to":
                self.device_copy = bytes(self.buf)
            else:
                self.buf[:] = self.device_copy

    class run:
        def wait(self):
            log.append(("wait",))

    class kernel:
        def __init__(self, ctx, name):
            log.append(("kernel", name))

        def group_id(self, i):
            return i

        def __call__(self, *args):
            log.append(("run",) + args)
            for b in args[3:]:                          # the "device" doubles every value
                v = np.frombuffer(b.device_copy, np.uint16).astype(np.uint32) << 16
                b.device_copy = ((v.view(np.float32) * 2).view(np.uint32) >> 16).astype(
                    np.uint16).tobytes()
            return run()

    class xclbin:
        def __init__(self, path):
            log.append(("xclbin", path))

        def get_uuid(self):
            return "uuid"

    class device:
        def __init__(self, index):
            log.append(("device", index))

        def register_xclbin(self, x):
            log.append(("register",))

    def hw_context(dev, uuid):
        log.append(("hw_context", uuid))
        return "ctx"

    sync = types.SimpleNamespace(XCL_BO_SYNC_BO_TO_DEVICE="to", XCL_BO_SYNC_BO_FROM_DEVICE="from")
    return types.SimpleNamespace(bo=bo, run=run, kernel=kernel, xclbin=xclbin, device=device,
                                 hw_context=hw_context, xclBOSyncDirection=sync)


def test_xrt_path_with_a_fake_pyxrt(tmp_path):
    log = []
    dev = XrtDevice(xrt=fake_pyxrt(log))
    insts = tmp_path / "insts.bin"
    np.arange(5, dtype=np.uint32).tofile(insts)
    art = types.SimpleNamespace(name="k", xclbin=str(tmp_path / "k.xclbin"), insts=str(insts),
                                kernel_name="MLIR_AIE", spec=None)
    kern = dev.kernel(art)
    bo = dev.alloc((6,), "x")
    x = to_bf16(np.array([1.5, -2.0, 3.25, 0.0, 1e-3, 7.0], np.float32))
    runtime.write(bo, x, dev.counters)
    bo.sync(TO_DEVICE)
    dev.run(kern, [bo])
    bo.sync(FROM_DEVICE)
    assert np.array_equal(bo.map(), 2 * x)              # bf16 packing survives the round trip
    runs = [e for e in log if e[0] == "run"]
    assert len(runs) == 1 and runs[0][1] == XrtDevice.OPCODE and runs[0][3] == 5
    assert dev.counters.dispatches == 1 and dev.counters.bytes_to_device == 12
    with pytest.raises(LlamanbError, match="no xclbin"):
        dev.kernel(types.SimpleNamespace(name="e", xclbin=None, insts="i", kernel_name="k"))
