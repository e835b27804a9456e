"""The NPU runtime: a device, buffer objects (BOs) and kernel runs -- emulated, or real through pyxrt.

A buffer object is memory both the host and the NPU can reach. The host never hands the NPU a
numpy array; it writes into a BO's host mapping, then syncs it:

    dev = EmulatedDevice()                          # or XrtDevice() on a Ryzen AI machine
    bo = dev.alloc((576,), "x")                     # a BO: host mapping + device side
    bo.map()[...] = x                               # host memcpy into the mapping (counted)
    bo.sync(TO_DEVICE)                              # flush to the device (bytes counted)
    k = dev.kernel(spec)                            # a loaded kernel (its MLIR text / ELF)
    dev.run(k, [bo_x, bo_w, bo_y])                  # one dispatch
    bo_y.sync(FROM_DEVICE); y = bo_y.map()          # read back

The emulated device keeps each BO's host and device contents apart (a sync really copies), runs
the module text on llamanb.npu.compiler.emulator, and counts: dispatches, bytes synced each way, host
memcpys into/out of mappings. Each run is also charged the cost model's *estimated* NPU time
(llamanb.npu.cost), kept apart from the wall time the emulation itself took: the emulator is a
numpy interpreter, so its wall time says nothing about the NPU.

Values are bf16 on the device. Host arrays here are float32 holding bf16 values (the emulator's
convention); byte counts use the device's bf16 size (Arg.nbytes), not the float32 host copy.

The real path (XrtDevice) imports pyxrt only when constructed and loads ELF groups the way
mlir-air's Llama runtime does: xrt.elf -> xrt.hw_context(device, elf) -> xrt.ext.kernel(ctx,
"main:<func>"), BOs from xrt.ext.bo, one xrt.run per call (set_arg per slot, start, a wait with a
timeout), and the run's state checked. Tests drive it with a contract fake of pyxrt written from pyxrt.cpp.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from llamanb.errors import LlamanbError

TO_DEVICE, FROM_DEVICE = "to_device", "from_device"
_ITEM = {"bf16": 2, "f32": 4, "i32": 4}


@dataclass
class Counters:
    """What a device did. `estimated_s` is the cost model's NPU time (an estimate, never measured);
    `wall_s` is the time the host spent inside run() (the emulation or the real dispatch)."""

    dispatches: int = 0
    bytes_to_device: int = 0
    bytes_from_device: int = 0
    syncs_to_device: int = 0
    syncs_from_device: int = 0
    host_memcpys: int = 0
    host_memcpy_bytes: int = 0
    estimated_s: float = 0.0
    wall_s: float = 0.0
    per_kernel: dict = field(default_factory=dict)     # name -> [calls, estimated_s]
    # name -> [calls, bytes to, bytes from, BO-write s, run s, BO-read s] (host-measured, by
    # KernelCache.load_and_run: the split upstream's profile reports per kernel)
    per_call: dict = field(default_factory=dict)

    def dispatch(self, name: str, wall_s: float, estimated_s: float) -> None:
        """One kernel run: its wall time, and the cost model's (estimated) device time."""
        self.wall_s += wall_s
        self.dispatches += 1
        self.estimated_s += estimated_s
        pk = self.per_kernel.setdefault(name, [0, 0.0])
        pk[0] += 1
        pk[1] += estimated_s

    def call_split(self, name: str, to_b: int, from_b: int, write_s: float, run_s: float,
                   read_s: float) -> None:
        """One KernelCache call of `name`: bytes synced each way and the host time spent writing
        BOs, in the run, and reading BOs back."""
        row = self.per_call.setdefault(name, [0, 0, 0, 0.0, 0.0, 0.0])
        for i, v in enumerate((1, to_b, from_b, write_s, run_s, read_s)):
            row[i] += v

    _TABLES = ("per_kernel", "per_call")

    def copy(self) -> "Counters":
        c = Counters(**{k: v for k, v in self.__dict__.items() if k not in self._TABLES})
        for t in self._TABLES:
            setattr(c, t, {k: list(v) for k, v in getattr(self, t).items()})
        return c

    def __sub__(self, other: "Counters") -> "Counters":
        c = Counters(**{k: getattr(self, k) - getattr(other, k) for k in self.__dict__
                        if k not in self._TABLES})
        for t in self._TABLES:
            mine, theirs = getattr(self, t), getattr(other, t)
            for k, row in mine.items():
                old = theirs.get(k, [0] * len(row))
                if row[0] - old[0]:
                    getattr(c, t)[k] = [a - b for a, b in zip(row, old)]
        return c

    def __add__(self, other: "Counters") -> "Counters":
        c = Counters(**{k: getattr(self, k) + getattr(other, k) for k in self.__dict__
                        if k not in self._TABLES})
        for t in self._TABLES:
            merged = {k: list(v) for k, v in getattr(self, t).items()}
            for k, row in getattr(other, t).items():
                merged[k] = [a + b for a, b in zip(merged.get(k, [0] * len(row)), row)]
            setattr(c, t, merged)
        return c

    def __str__(self) -> str:
        # two lines: each fits a notebook's 120-column output
        return (f"{self.dispatches} dispatches, {self.bytes_to_device:,} B to device, "
                f"{self.bytes_from_device:,} B from device, {self.host_memcpys} host memcpys "
                f"({self.host_memcpy_bytes:,} B)\n  estimated NPU time {self.estimated_s * 1e3:.3f} ms "
                f"(cost model, not measured)")


class BufferObject(Protocol):
    name: str
    shape: tuple
    nbytes: int

    def map(self) -> np.ndarray: ...
    def sync(self, direction: str) -> None: ...


class Device(Protocol):
    """What the KernelCache and the NPU2 backend need from a device."""

    counters: Counters
    emulated: bool

    def alloc(self, shape, name: str = "", dtype: str = "bf16") -> BufferObject: ...
    def kernel(self, artifact) -> object: ...
    def run(self, kernel, bos: Sequence[BufferObject]) -> None: ...


def _shape(shape) -> tuple[int, ...]:
    try:
        shape = tuple(int(s) for s in (shape if isinstance(shape, (tuple, list)) else (shape,)))
    except (TypeError, ValueError):
        raise LlamanbError(f"a buffer shape must be a tuple of positive integers, got {shape!r}")
    if not shape or any(s <= 0 for s in shape):
        raise LlamanbError(f"a buffer shape must be a tuple of positive integers, got {shape!r}")
    return shape


def _direction(direction: str) -> str:
    if direction not in (TO_DEVICE, FROM_DEVICE):
        raise LlamanbError(f"sync direction must be {TO_DEVICE!r} or {FROM_DEVICE!r}, "
                           f"got {direction!r}")
    return direction


def write(bo: BufferObject, array: np.ndarray, counters: Counters) -> None:
    """Host memcpy of `array` into the BO's mapping (one counted memcpy of the device size)."""
    m = bo.map()
    a = np.asarray(array, dtype=np.float32)
    if a.size != m.size:
        raise LlamanbError(f"buffer {bo.name or '?'} holds {m.size} values {tuple(bo.shape)}, "
                           f"got an array of shape {a.shape}")
    m.reshape(-1)[...] = a.reshape(-1)
    counters.host_memcpys += 1
    counters.host_memcpy_bytes += bo.nbytes


def read(bo: BufferObject, counters: Counters) -> np.ndarray:
    """Host memcpy out of the BO's mapping into a fresh array (counted)."""
    out = np.array(bo.map(), dtype=np.float32, copy=True).reshape(bo.shape)
    counters.host_memcpys += 1
    counters.host_memcpy_bytes += bo.nbytes
    return out


# ---------------------------------------------------------------- the emulated device

class EmulatedBO:
    """A BO of the emulated NPU2: a host mapping and a separate device copy; sync copies."""

    def __init__(self, device: "EmulatedDevice", shape, name: str, dtype: str):
        self.device, self.name, self.dtype = device, name, dtype
        self.shape = _shape(shape)
        self.size = int(np.prod(self.shape))
        self.nbytes = self.size * _ITEM[dtype]
        self._host = np.zeros(self.shape, np.float32)
        self.device_array = np.zeros(self.shape, np.float32)   # what the NPU sees

    def map(self) -> np.ndarray:
        return self._host

    def freeze(self) -> bool:
        """Make the device contents read-only (a static slot, written once) and record them as
        checked bfloat16 values when they are (extern.mark_bf16), so the kernels' models skip
        the per-call check of this buffer. Returns whether they were recorded."""
        from llamanb.npu.compiler.extern import mark_bf16

        self.device_array.flags.writeable = False
        return self.dtype == "bf16" and mark_bf16(self.device_array)

    def thaw(self) -> None:
        """Writeable again (a recorded check no longer applies: extern skips only read-only)."""
        self.device_array.flags.writeable = True

    def sync(self, direction: str) -> None:
        c = self.device.counters
        if _direction(direction) == TO_DEVICE:
            if not self.device_array.flags.writeable:
                self.thaw()                                   # written again: checked again
            self.device_array[...] = self._host
            c.bytes_to_device += self.nbytes
            c.syncs_to_device += 1
        else:
            self._host[...] = self.device_array
            c.bytes_from_device += self.nbytes
            c.syncs_from_device += 1

    def __repr__(self) -> str:
        return f"EmulatedBO({self.name}: {list(self.shape)} {self.dtype}, {self.nbytes:,} B)"


@dataclass
class EmulatedKernel:
    name: str
    spec: object                   # a KernelSpec (or an artifact with .text and .args)
    estimated_s: float             # the cost model's time per run


class EmulatedDevice:
    """The emulated NPU2 (says so): BO contents kept, every dispatch and byte counted."""

    emulated = True
    description = "emulated NPU2 (numpy interpreter of the MLIR-AIR text; times are estimates)"

    def __init__(self, cost=None, externs: dict | None = None, execute: str = "text"):
        """execute="text": interpret the MLIR text (llamanb.npu.compiler.emulator; faithful, slow);
        "model": run the spec's numpy semantics (same buffers and counts, ~10x faster; a spec
        read back from disk has no model and is interpreted)."""
        if execute not in ("text", "model"):
            raise LlamanbError(f"execute must be 'text' or 'model', got {execute!r}")
        self.execute = execute
        self.counters = Counters()
        self.cost = cost                      # callable(spec) -> seconds, or None: llamanb.npu.cost
        self.externs = externs
        self.last_run = None

    def alloc(self, shape, name: str = "", dtype: str = "bf16") -> EmulatedBO:
        if dtype not in _ITEM:
            raise LlamanbError(f"buffer dtype must be one of {', '.join(_ITEM)}, got {dtype!r}")
        return EmulatedBO(self, shape, name, dtype)

    def kernel(self, artifact) -> EmulatedKernel:
        spec = getattr(artifact, "spec", artifact)
        if not hasattr(spec, "text") or not hasattr(spec, "args"):
            raise LlamanbError(f"the emulated NPU2 runs a kernel spec or an artifact holding one, "
                               f"got {type(artifact).__name__}")
        if self.cost is None:
            from llamanb.npu.cost import kernel_time
            est = kernel_time(spec)
        else:
            est = float(self.cost(spec))
        return EmulatedKernel(spec.name, spec, est)

    def run(self, kernel: EmulatedKernel, bos: Sequence[EmulatedBO]) -> None:
        if len(bos) != len(kernel.spec.args):
            raise LlamanbError(f"{kernel.name} takes {len(kernel.spec.args)} buffers, "
                               f"got {len(bos)}")
        t0 = time.perf_counter()
        arrays = [b.device_array for b in bos]
        if self.execute == "model" and getattr(kernel.spec, "model", None) is not None:
            kernel.spec.model(*arrays)
            self.last_run = None
        else:
            from llamanb.npu.compiler.emulator import run as emulate
            self.last_run = emulate(kernel.spec, *arrays, externs=self.externs)
        self.counters.dispatch(kernel.name, time.perf_counter() - t0, kernel.estimated_s)


# ---------------------------------------------------------------- the real device (pyxrt)
#
# The ELF path of the MLIR-AIR Llama runtime, call for call (Xilinx/mlir-air: python/air/backend/
# xrt.py, XRTBackend.load and its invoker, lines 723-785; programming_examples/llms/shared/infra/
# cache.py, KernelCache.load_and_run, lines 638-711), against XRT's Python bindings (Xilinx/XRT:
# src/python/pybind11/src/pyxrt.cpp):
#
#   device = pyxrt.device(0)                           pyxrt.cpp:362     xrt.py:723
#   elf    = pyxrt.elf(path)                           pyxrt.cpp:602-604 xrt.py:729
#   ctx    = pyxrt.hw_context(device, elf)             pyxrt.cpp:324-329 xrt.py:730
#   kernel = pyxrt.ext.kernel(ctx, "main:<func>")      pyxrt.cpp:715-719 xrt.py:731
#   bo     = pyxrt.ext.bo(device, nbytes)              pyxrt.cpp:681-685 cache.py:640
#   bo.map() (bytes), bo.sync(XCL_BO_SYNC_BO_TO_DEVICE / _FROM_DEVICE)
#                                                      pyxrt.cpp:533-538 cache.py:682-686, 711
#   run = pyxrt.run(kernel); run.set_arg(i, bo) for every slot; run.start(); run.wait(timeout_ms)
#                                                      pyxrt.cpp:426-441 cache.py:694-698
#
# The wait has a timeout of its own. wait2() without one blocks until the command ends (a hung NPU
# hangs the process); its timeout overload, wait2(std::chrono::milliseconds) (pyxrt.cpp:445-447),
# cannot be called from Python: pyxrt.cpp does not include <pybind11/chrono.h>, so pybind11 has no
# converter for the argument (nor for the std::cv_status it returns), whatever pyxrt.pyi says. The
# overload that works is wait(timeout_ms: unsigned int) -> ert_cmd_state (pyxrt.cpp:439-441), the
# one mlir-air's Python LLM examples call, wait(60000) (e.g. programming_examples/llms/
# qwen3_8b_q4nx/qwen3_8b_q4nx_inference.py:367); it returns ERT_CMD_STATE_TIMEOUT when the time
# runs out and, unlike wait2(), returns -- not throws -- any other state (xrt_kernel.h:280-339).
# So run() waits at most `timeout_s`, then checks the returned state and run.state()
# (pyxrt.cpp:448): a run that timed out, hung or aborted is one LlamanbError naming the group, the
# state and the timeout, never wrong tokens (mlir-air#1822, the reason for xrt.py's
# _check_run_state, lines 204-218).
WAIT_S = 60.0          # as mlir-air's examples, wait(60000)


@dataclass(frozen=True)
class ElfArtifact:
    """What the real runtime loads: mlir-air's XRTCompileArtifact for output_format="elf"
    (Xilinx/mlir-air python/air/backend/xrt.py:160-185, returned at :611) -- the ELF path
    (`output_binary`) and the kernel name "main:<instance_name>" (:573-593) -- plus the group's
    name and argument table (`spec`), which the ELF does not carry."""

    name: str
    output_binary: str
    kernel: str
    spec: object = None


def have_pyxrt() -> bool:
    try:
        import pyxrt  # noqa: F401
    except ImportError:
        return False
    return True


class XrtBO:
    """A pyxrt.ext.bo seen as a float32 array of bf16 values on the host.

    pyxrt maps a BO as raw bytes (a memoryview of bo.size() bytes, pyxrt.cpp:536-538); bf16 is the
    high half of a float32, so the host view is kept as float32 and converted on sync: to_device
    packs the top 16 bits (after llamanb's rounding) into the mapping, then syncs; from_device
    syncs, then widens them back."""

    def __init__(self, device: "XrtDevice", bo, shape, name: str, dtype: str):
        self.device, self.bo, self.name, self.dtype = device, bo, name, dtype
        self.shape = _shape(shape)
        self.nbytes = int(np.prod(self.shape)) * _ITEM[dtype]
        self._host = np.zeros(self.shape, np.float32)

    def map(self) -> np.ndarray:
        return self._host

    def sync(self, direction: str) -> None:
        xrt, c = self.device.xrt, self.device.counters
        raw = np.frombuffer(self.bo.map(), dtype=np.uint8)[:self.nbytes]
        if _direction(direction) == TO_DEVICE:
            if self.dtype == "bf16":
                from llamanb.model.numerics import to_bf16
                bits = (to_bf16(self._host).view(np.uint32) >> 16).astype(np.uint16)
                raw[...] = bits.reshape(-1).view(np.uint8)
            else:
                raw[...] = self._host.reshape(-1).view(np.uint8)
            self.bo.sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
            c.bytes_to_device += self.nbytes
            c.syncs_to_device += 1
        else:
            self.bo.sync(xrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
            if self.dtype == "bf16":
                wide = raw.view(np.uint16).astype(np.uint32) << 16
                self._host.reshape(-1)[...] = wide.view(np.float32)
            else:
                self._host.reshape(-1)[...] = raw.view(np.float32)
            c.bytes_from_device += self.nbytes
            c.syncs_from_device += 1


@dataclass
class XrtKernel:
    name: str                      # the group (llamanb's name for it)
    kernel: object                 # pyxrt.ext.kernel
    context: object                # pyxrt.hw_context built from the ELF (kept alive with it)
    elf: object                    # pyxrt.elf
    n_args: int
    estimated_s: float


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0] if text else ''}".rstrip(": ")


class XrtDevice:
    """A real NPU2 through pyxrt (imported here, not at package import), ELF groups only."""

    emulated = False
    description = "AMD NPU2 through XRT (pyxrt), ELF groups"

    def __init__(self, index: int = 0, xrt=None, timeout_s: float = WAIT_S):
        if not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < 4e6:
            raise LlamanbError(f"the NPU run timeout must be a positive number of seconds "
                               f"(under 4e6: XRT takes unsigned milliseconds), got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        if xrt is None:
            try:
                import pyxrt as xrt
            except ImportError:
                raise LlamanbError("the npu2 backend needs pyxrt (XRT's Python bindings) and an "
                                   "NPU bound to amdxdna; use --backend npu2-emulated instead")
        self.xrt = xrt
        try:
            self.device = xrt.device(index)
        except Exception as e:                 # noqa: BLE001 - XRT raises RuntimeError subclasses
            from llamanb.npu.locate import device_missing
            why = device_missing()
            raise LlamanbError(f"XRT could not open NPU device {index}: {_one_line(e)}"
                               + (f" (missing {why[0]})" if why else "")) from None
        self.counters = Counters()

    def alloc(self, shape, name: str = "", dtype: str = "bf16") -> XrtBO:
        if dtype not in _ITEM:
            raise LlamanbError(f"buffer dtype must be one of {', '.join(_ITEM)}, got {dtype!r}")
        nbytes = int(np.prod(_shape(shape))) * _ITEM[dtype]
        return XrtBO(self, self.xrt.ext.bo(self.device, nbytes), shape, name, dtype)

    def kernel(self, artifact) -> XrtKernel:
        """Load an ElfArtifact: xrt.elf -> xrt.hw_context(device, elf) -> xrt.ext.kernel(ctx,
        "main:<func>"), as XRTBackend.load does for an ELF (xrt.py:725-738)."""
        import os

        name = getattr(artifact, "name", "?")
        path, kname = getattr(artifact, "output_binary", None), getattr(artifact, "kernel", None)
        if not path or not str(path).endswith(".elf") or not kname:
            raise LlamanbError(f"{name}: the npu2 runtime loads an ELF and its kernel name "
                               f"'main:<func>' (got {path!r}, {kname!r}); was it compiled for "
                               f"the emulated NPU2?")
        if not os.path.isfile(path):
            raise LlamanbError(f"{name}: ELF {path} does not exist (compile it again)")
        xrt = self.xrt
        try:
            elf = xrt.elf(str(path))
            ctx = xrt.hw_context(self.device, elf)
            kern = xrt.ext.kernel(ctx, kname)
        except Exception as e:                 # noqa: BLE001
            raise LlamanbError(f"{name}: XRT could not load kernel {kname!r} from {path}: "
                               f"{_one_line(e)}") from None
        from llamanb.npu.cost import kernel_time
        spec = getattr(artifact, "spec", None)
        n = len(spec.args) if spec is not None else -1
        return XrtKernel(name, kern, ctx, elf, n, kernel_time(spec) if spec is not None else 0.0)

    def run(self, kernel: XrtKernel, bos: Sequence[XrtBO]) -> None:
        """One xrt.run of the group: every slot bound in order, start, wait(timeout), and the
        state checked."""
        if kernel.n_args >= 0 and len(bos) != kernel.n_args:
            raise LlamanbError(f"{kernel.name} takes {kernel.n_args} buffers, got {len(bos)}")
        xrt = self.xrt
        t0 = time.perf_counter()
        try:
            run = xrt.run(kernel.kernel)
            for i, b in enumerate(bos):
                run.set_arg(i, b.bo)
            run.start()
        except Exception as e:                 # noqa: BLE001 - XRT's errors are RuntimeErrors
            raise LlamanbError(f"NPU group {kernel.name}: XRT refused the run: "
                               f"{_one_line(e)}") from None
        failure, waited = None, None
        ms = int(round(self.timeout_s * 1000))
        try:
            waited = run.wait(ms)
        except Exception as e:                 # noqa: BLE001 - XRT's errors are RuntimeErrors
            failure = _one_line(e)
        es = xrt.ert_cmd_state
        state = run.state()
        done = es.ERT_CMD_STATE_COMPLETED
        if failure is not None or waited != done or state != done:
            if waited == es.ERT_CMD_STATE_TIMEOUT:
                raise LlamanbError(f"NPU group {kernel.name}: no completion within the "
                                   f"{self.timeout_s:g} s timeout (run.wait({ms}) returned "
                                   f"ERT_CMD_STATE_TIMEOUT); the NPU may be hung")
            sname = getattr(state, "name", str(state))
            raise LlamanbError(f"NPU group {kernel.name}: the run ended in state {sname}, not "
                               f"ERT_CMD_STATE_COMPLETED (waited at most {self.timeout_s:g} s)"
                               + (f" ({failure})" if failure else ""))
        self.counters.dispatch(kernel.name, time.perf_counter() - t0, kernel.estimated_s)
