"""Contract fakes of the real NPU stack, written from upstream's source (not from llamanb's code):

    make_pyxrt(log, timeout=...)   XRT's Python bindings, the ELF subset the MLIR-AIR Llama runtime
                                   uses (Xilinx/XRT src/python/pybind11/src/pyxrt.cpp)
    air_modules(log)               mlir-air's `air`, `air.ir`, `air.backend.xrt` (XRTBackend,
                                   XRTCompileArtifact; Xilinx/mlir-air python/air/backend/xrt.py)
    fake_peano(dir)                a Peano clang++ that writes objects (the llvm-aie compiler)

Each call refuses what pybind11 would refuse: a wrong number or type of arguments raises TypeError
("incompatible function arguments"), as pybind11's overload resolution does. Only the ELF overloads
are bound: the xclbin ones (hw_context(device, uuid), device.register_xclbin, xrt.kernel, xrt.bo
with flags and a memory group, kernel(3, instr, n, *bos)) are absent ON PURPOSE, so code that
departs from the ELF path fails here. Line numbers are of the snapshots read for this course:
Xilinx/XRT 963c58ee2 and Xilinx/mlir-air e972f2942.

The "device" behind the fake keeps each BO's host mapping and device bytes apart (a sync copies;
pyxrt.cpp:530-538) and, on run.start(), runs the module embedded in the ELF through llamanb's MLIR
interpreter on the device bytes -- the fake's stand-in for the NPU; what the tests check is the
plumbing around it (load, argument binding, syncs, bf16 packing, the state), against references
outside it.
"""
from __future__ import annotations

import enum
import json
import os
import re
import shutil
import stat
import sys
import types
from pathlib import Path

import numpy as np

ELF_MAGIC = b"\x7fELF"


def _refuse(what: str, args, kwargs, sigs: str):
    got = ", ".join([type(a).__name__ for a in args] + [f"{k}={type(v).__name__}"
                                                       for k, v in kwargs.items()])
    raise TypeError(f"{what}(): incompatible function arguments. The following argument types are "
                    f"supported:\n{sigs}\nInvoked with: {got}")


def _int(x) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, bool)


# ------------------------------------------------------------------------------------ pyxrt

class BlockedForever(BaseException):
    """Raised by the fake where the real call would block forever (a wait without a timeout on a
    run that never completes): a test sees it instead of hanging. A BaseException, so that code
    catching Exception cannot mistake "never returns" for an error it handled."""


def make_pyxrt(log: list | None = None, timeout: tuple = (), abort: tuple = (), hang: tuple = ()):
    """A pyxrt module object. Runs of a kernel whose name ("main:<func>") ends with a name in
    `timeout` end in ERT_CMD_STATE_TIMEOUT (in `abort`: ERT_CMD_STATE_ABORT) without writing
    anything; in `hang`, they never end (a wait with a timeout returns ERT_CMD_STATE_TIMEOUT, one
    without raises BlockedForever). `log` records every call as a tuple."""
    log = log if log is not None else []
    m = types.ModuleType("pyxrt")

    class xclBOSyncDirection(enum.Enum):
        """pyxrt.cpp:180-184."""
        XCL_BO_SYNC_BO_TO_DEVICE = 0
        XCL_BO_SYNC_BO_FROM_DEVICE = 1
        XCL_BO_SYNC_BO_GMIO_TO_AIE = 2
        XCL_BO_SYNC_BO_AIE_TO_GMIO = 3

    class ert_cmd_state(enum.Enum):
        """pyxrt.cpp:186-196 (the enumerators; their integer values are not used here)."""
        ERT_CMD_STATE_NEW = 1
        ERT_CMD_STATE_QUEUED = 2
        ERT_CMD_STATE_COMPLETED = 4
        ERT_CMD_STATE_ERROR = 5
        ERT_CMD_STATE_ABORT = 6
        ERT_CMD_STATE_SUBMITTED = 7
        ERT_CMD_STATE_TIMEOUT = 8
        ERT_CMD_STATE_NORESPONSE = 9
        ERT_CMD_STATE_SKERROR = 10
        ERT_CMD_STATE_SKCRASHED = 11

    class device:
        """xrt.device(): pyxrt.cpp:361 (empty), :362 (index: int), :363-365 (bdf: str)."""

        def __init__(self, *args, **kwargs):
            if kwargs and set(kwargs) not in ({"index"}, {"bdf"}):
                _refuse("device.__init__", args, kwargs, "(), (index: int), (bdf: str)")
            args = args + tuple(kwargs.values())
            if len(args) > 1 or (args and not (_int(args[0]) or isinstance(args[0], str))):
                _refuse("device.__init__", args, {}, "(), (index: int), (bdf: str)")
            self.index = args[0] if args else None
            log.append(("device", self.index))

    class elf:
        """xrt.elf(filename: str): pyxrt.cpp:602-604 (the (data, size) overload, :605-606, is not
        used by the runtime and not bound here). Reads the file; a file that is no ELF fails as
        XRT's loader does (RuntimeError)."""

        def __init__(self, *args, **kwargs):
            if kwargs or len(args) != 1 or not isinstance(args[0], str):
                _refuse("elf.__init__", args, kwargs, "(arg0: str)")
            data = Path(args[0]).read_bytes()
            if not data.startswith(ELF_MAGIC):
                raise RuntimeError(f"{args[0]}: not an ELF file")
            self.path, self.meta = args[0], json.loads(data[len(ELF_MAGIC):].decode())
            log.append(("elf", args[0]))

    class hw_context:
        """xrt.hw_context(device, elf): pyxrt.cpp:324-329, the ELF overload. The uuid / xclbin /
        path overloads (:260-316) are deliberately not bound (see the module docstring)."""

        def __init__(self, *args, **kwargs):
            args = args + tuple(kwargs[k] for k in ("device", "elf") if k in kwargs)
            if set(kwargs) - {"device", "elf"} or len(args) != 2 \
                    or not isinstance(args[0], device) or not isinstance(args[1], elf):
                _refuse("hw_context.__init__", args, {}, "(device: pyxrt.device, elf: pyxrt.elf)")
            self.device, self.elf = args
            log.append(("hw_context", args[1].path))

    class bo:
        """The xrt::bo methods the runtime calls: sync(direction) pyxrt.cpp:533-535,
        sync(direction, size, offset) :530-532, map() -> memoryview of size() bytes :536-538,
        size() :539. Not constructible here: the xclbin-style constructors (:510-518) are
        deliberately not bound; ELF code allocates xrt.ext.bo."""

        def __init__(self, *args, **kwargs):
            _refuse("bo.__init__", args, kwargs, "(not bound in the ELF contract fake; use "
                    "pyxrt.ext.bo(device, size))")

        def _setup(self, nbytes: int):
            self._host = bytearray(nbytes)
            self._dev = bytearray(nbytes)

        def map(self, *args, **kwargs):
            if args or kwargs:
                _refuse("bo.map", args, kwargs, "()")
            return memoryview(self._host)

        def size(self):
            return len(self._host)

        def sync(self, *args, **kwargs):
            if kwargs or len(args) not in (1, 3) or not isinstance(args[0], xclBOSyncDirection) \
                    or not all(_int(a) for a in args[1:]):
                _refuse("bo.sync", args, kwargs, "(dir: xclBOSyncDirection), "
                        "(dir: xclBOSyncDirection, size: int, offset: int)")
            size, ofs = (args[1], args[2]) if len(args) == 3 else (len(self._host), 0)
            d = args[0]
            if d is xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE:
                self._dev[ofs:ofs + size] = self._host[ofs:ofs + size]
            elif d is xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE:
                self._host[ofs:ofs + size] = self._dev[ofs:ofs + size]
            else:
                raise RuntimeError(f"sync direction {d.name} is for AIE GMIO, not an NPU BO")
            log.append(("sync", d.name, size))

    ext = types.ModuleType("pyxrt.ext")

    class ext_bo(bo):
        """xrt.ext.bo(device, size): pyxrt.cpp:681-685 (and (hwctx, size), :696-700); a subclass
        of xrt.bo (pyxrt.cpp:637). The user-pointer, access-mode and export-handle overloads
        (:666-680, :686-705) are not used by the runtime and not bound here."""

        def __init__(self, *args, **kwargs):
            args = args + tuple(kwargs[k] for k in ("device", "hwctx", "size") if k in kwargs)
            if set(kwargs) - {"device", "hwctx", "size"} or len(args) != 2 \
                    or not isinstance(args[0], (device, hw_context)) or not _int(args[1]):
                _refuse("ext.bo.__init__", args, {}, "(device: pyxrt.device, size: int), "
                        "(hwctx: pyxrt.hw_context, size: int)")
            if args[1] <= 0:
                raise RuntimeError(f"ext.bo: cannot allocate {args[1]} bytes")
            self._setup(int(args[1]))
            log.append(("ext.bo", int(args[1])))

    class kernel:
        """Base of xrt.ext.kernel (pyxrt.cpp:453). Its own constructor and __call__ -- the xclbin
        convention kernel(3, instr, n, *bos), pyxrt.cpp:464-490 -- are deliberately not bound."""

        def __init__(self, *args, **kwargs):
            _refuse("kernel.__init__", args, kwargs, "(not bound in the ELF contract fake; use "
                    "pyxrt.ext.kernel(hwctx, 'main:<func>'))")

    class ext_kernel(kernel):
        """xrt.ext.kernel(hwctx, name): pyxrt.cpp:715-719 (the (hwctx, module, name) overload,
        :710-714, is not bound). The name must be one the ELF's context holds, "main:<func>" for
        mlir-air's ELF output (python/air/backend/xrt.py:573-593); another name fails as XRT
        fails to find the kernel (RuntimeError)."""

        def __init__(self, *args, **kwargs):
            args = args + tuple(kwargs[k] for k in ("hwctx", "name") if k in kwargs)
            if set(kwargs) - {"hwctx", "name"} or len(args) != 2 \
                    or not isinstance(args[0], hw_context) or not isinstance(args[1], str):
                _refuse("ext.kernel.__init__", args, {}, "(hwctx: pyxrt.hw_context, name: str)")
            ctx, name = args
            if name not in ctx.elf.meta["kernels"]:
                raise RuntimeError(f"No such kernel '{name}' in the hardware context "
                                   f"(it holds {ctx.elf.meta['kernels']})")
            self.ctx, self.name = ctx, name
            log.append(("ext.kernel", name))

    class run:
        """xrt.run(kernel): pyxrt.cpp:426; set_arg(int, bo) :430-432 and (int, int) :433-435;
        start() :427-429; wait2() :442-444, which returns None (xrt::run::wait2() is void) and
        throws xrt::run::command_error -- a RuntimeError in Python -- when the command ends in any
        state but COMPLETED (Xilinx/XRT src/runtime_src/core/include/xrt/xrt_kernel.h:378-392;
        xrt_kernel.cpp:4732-4741); state() :448 -> ert_cmd_state."""

        def __init__(self, *args, **kwargs):
            if kwargs or len(args) != 1 or not isinstance(args[0], kernel):
                _refuse("run.__init__", args, kwargs, "(), (arg0: pyxrt.kernel)")
            self.kernel, self.args = args[0], {}
            self._state = ert_cmd_state.ERT_CMD_STATE_NEW
            log.append(("run", self.kernel.name))

        def set_arg(self, *args, **kwargs):
            if kwargs or len(args) != 2 or not _int(args[0]) or \
                    not (isinstance(args[1], bo) or _int(args[1])):
                _refuse("run.set_arg", args, kwargs, "(arg0: int, arg1: pyxrt.bo), "
                        "(arg0: int, arg1: int)")
            self.args[int(args[0])] = args[1]
            log.append(("set_arg", int(args[0])))

        def start(self, *args, **kwargs):
            if args or kwargs:
                _refuse("run.start", args, kwargs, "()")
            log.append(("start", self.kernel.name))
            func = self.kernel.name.split(":", 1)[1]
            if func in hang:
                self._state = ert_cmd_state.ERT_CMD_STATE_SUBMITTED     # and stays there
                return
            if func in timeout:
                self._state = ert_cmd_state.ERT_CMD_STATE_TIMEOUT
                return
            if func in abort:
                self._state = ert_cmd_state.ERT_CMD_STATE_ABORT
                return
            _execute(self.kernel.ctx.elf.meta["module"], self.args)
            self._state = ert_cmd_state.ERT_CMD_STATE_COMPLETED

        def _hung(self) -> bool:
            return self._state is ert_cmd_state.ERT_CMD_STATE_SUBMITTED

        def wait2(self, *args, **kwargs):
            """wait2() :442-444. The timeout overload, wait2(const std::chrono::milliseconds&)
            :445-447, is refused for every argument, as the real binding refuses it: pyxrt.cpp
            includes no <pybind11/chrono.h> (:28-31), so pybind11 has no caster for the argument
            (pyxrt.pyi's `wait2(self, timeout: int)` notwithstanding)."""
            if args or kwargs:
                _refuse("run.wait2", args, kwargs, "(self: pyxrt.run), (self: pyxrt.run, arg0: "
                        "std::chrono::duration<long, std::ratio<1l, 1000l> >)")
            log.append(("wait2", self.kernel.name))
            if self._state is ert_cmd_state.ERT_CMD_STATE_NEW:
                raise RuntimeError("run was never started")
            if self._hung():
                raise BlockedForever("wait2() without a timeout on a run that never completes")
            if self._state is not ert_cmd_state.ERT_CMD_STATE_COMPLETED:
                raise RuntimeError(f"Command failed to complete successfully "
                                   f"({self._state.name})")
            return None

        def wait(self, *args, **kwargs):
            """wait() :436-438 (r.wait(0): block until done) and wait(timeout_ms: unsigned int)
            :439-441 -> ert_cmd_state: the state the command ended in, not an exception, or
            ERT_CMD_STATE_TIMEOUT when the time ran out (xrt_kernel.h:280-339). pybind11 refuses
            a negative or non-integer timeout_ms (TypeError), and one past 2**32 - 1."""
            if kwargs or len(args) > 1 or (args and not (_int(args[0]) and 0 <= args[0] < 2 ** 32)):
                _refuse("run.wait", args, kwargs, "(self: pyxrt.run), (self: pyxrt.run, arg0: int)")
            ms = int(args[0]) if args else 0
            log.append(("wait", self.kernel.name, ms))
            if self._hung():
                if ms == 0:
                    raise BlockedForever("wait() without a timeout on a run that never completes")
                return ert_cmd_state.ERT_CMD_STATE_TIMEOUT
            return self._state

        def state(self, *args, **kwargs):
            if args or kwargs:
                _refuse("run.state", args, kwargs, "()")
            return self._state

    ext.bo, ext.kernel = ext_bo, ext_kernel
    for k, v in dict(xclBOSyncDirection=xclBOSyncDirection, ert_cmd_state=ert_cmd_state,
                     device=device, elf=elf, hw_context=hw_context, bo=bo, kernel=kernel, run=run,
                     ext=ext).items():
        setattr(m, k, v)
    m.log = log
    return m


def _execute(text: str, bound: dict) -> None:
    """The fake NPU: every argument slot must be bound to a BO of exactly the argument's size
    (an ELF kernel reads its arguments by position); the module runs on the device bytes."""
    from llamanb.npu.compiler.emulator import run as emulate
    from llamanb.npu.compiler.textir import memref_info, read_module

    mod = read_module(text)
    arrays, bos = [], []
    for i, (name, ty) in enumerate(mod.func.args):
        b = bound.get(i)
        shape, dtype, _ = memref_info(ty)
        nbytes = int(np.prod(shape)) * {"bf16": 2, "f32": 4, "i32": 4}[dtype]
        if b is None or _int(b):
            raise RuntimeError(f"@{mod.func.name}: argument {i} ({name}) is not bound to a BO")
        if b.size() != nbytes:
            raise RuntimeError(f"@{mod.func.name}: argument {i} ({name}) needs {nbytes} bytes, "
                               f"bound to a BO of {b.size()}")
        raw = np.frombuffer(bytes(b._dev), np.uint8)
        if dtype == "bf16":
            a = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32).reshape(shape)
        else:
            a = raw.view(np.float32).reshape(shape).copy()
        arrays.append(np.ascontiguousarray(a))
        bos.append((b, dtype))
    if len(bound) != len(mod.func.args):
        raise RuntimeError(f"@{mod.func.name} takes {len(mod.func.args)} arguments, "
                           f"{len(bound)} were set")
    emulate(text, *arrays)
    for (b, dtype), a in zip(bos, arrays):
        if dtype == "bf16":
            bits = (a.reshape(-1).view(np.uint32) >> 16).astype(np.uint16)
            b._dev[:] = bits.view(np.uint8).tobytes()
        else:
            b._dev[:] = a.reshape(-1).astype(np.float32).view(np.uint8).tobytes()


# ------------------------------------------------------------------------------------ mlir-air

XRT_BACKEND_DEFAULTS = dict(             # python/air/backend/xrt.py:224-253, in order
    verbose=False, target_device=None, omit_while_true_loop=False, omit_pingpong="",
    lower_linalg_to_func=None, derive_library_call=False, air_loop_fusion=False,
    runtime_loop_tiling_sizes=[], omit_auto_broadcast=False, channel_multiplexing=[],
    use_lock_race_condition_fix=False, use_lock_race_condition_fix_v2=False,
    coalesce_shim_dma=False, trace_offset=0, trace_size=0, output_format="xclbin",
    kernel_name="", instance_name="", kernel_id="", xclbin_input="", num_device_cols=0,
    debug_ir=False, emit_txn_cpp=False, bf16_emulation=False, stack_size=1024, n_perf_iters=0,
    n_warmup_iters=10)


MLIR_AIR_VERSION = "0.0.1.2026082205+e972f29"      # the wheel's version form, setup.py:280-292


def fake_air_wheel(site_dir: Path, version: str = MLIR_AIR_VERSION, aircc: bool = True) -> Path:
    """The files the mlir-air wheel installs into a site dir, as far as the set-up checks look:
    mlir_air/python/air (a namespace package: no __init__.py, python/air/ in the source tree),
    mlir_air/python/air/_mlir_libs/_air*.so, mlir_air/bin/aircc (the native tool tools.py resolves,
    :23-36) and the distribution's metadata (project name "mlir-air",
    utils/mlir_air_wheels/pyproject.toml:2; file names "mlir_air-<version>", as the wheels are
    named, .github/workflows/buildAIRWheels.yml:69). Returns the air package directory."""
    air_dir = site_dir / "mlir_air" / "python" / "air"
    (air_dir / "_mlir_libs").mkdir(parents=True, exist_ok=True)
    (air_dir / "_mlir_libs" / "_air.cpython-311-x86_64-linux-gnu.so").write_bytes(b"\x7fELF so")
    if aircc:
        tool = site_dir / "mlir_air" / "bin" / "aircc"
        tool.parent.mkdir(parents=True, exist_ok=True)
        tool.write_text("#!/bin/sh\necho 'fake aircc: the contract fake XRTBackend never runs it' "
                        ">&2\nexit 1\n")
        tool.chmod(0o755)
    set_dist_version(site_dir, version)
    return air_dir


def set_dist_version(site_dir: Path, version: str, name: str = "mlir-air") -> None:
    """(Re)write <name>-<version>.dist-info/METADATA under site_dir, replacing any other version."""
    stem = name.replace("-", "_")
    for old in site_dir.glob(f"{stem}-*.dist-info"):
        for f in old.iterdir():
            f.unlink()
        old.rmdir()
    d = site_dir / f"{stem}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    import importlib
    importlib.invalidate_caches()


def air_modules(log: list | None = None, air_dir: Path | None = None,
                aircc_error: str | None = None) -> dict:
    """{module name: module} for sys.modules: air, air.ir, air.backend, air.backend.xrt. `air` is a
    namespace package as upstream's (no __version__; __path__ = [air_dir]); `aircc_error`: what a
    failing aircc prints (XRTBackend.compile raises it, xrt.py:569-571)."""
    log = log if log is not None else []

    class AirBackendError(Exception):
        """python/air/backend/abc.py's error type, as xrt.py:9 imports it."""

    class XRTCompileArtifact:
        """python/air/backend/xrt.py:160-185: output_binary, kernel, insts, txn_header."""

        def __init__(self, output_binary, kernel, insts, txn_header=None):
            self.output_binary, self.kernel = output_binary, kernel
            self.insts, self.txn_header = insts, txn_header

    class XRTBackend:
        """python/air/backend/xrt.py:221-611: the constructor's keyword arguments (:224-253; an
        unknown one is a TypeError, as for any Python function) and compile(air_module,
        output_binary_name="air", kernel="MLIR_AIE", insts="air.insts.bin") (:345-351), which:
        resolves target_device -- None asks xrt-smi and, with none, falls back to "npu1"
        (:64-126, :370-376); refuses ELF output for npu1 (:381-386); builds aircc's options
        (:445-549; recorded in the log and the ELF); needs every `link_with` object in the
        working directory or air_project/ (where upstream's prepare_air_project stages them,
        programming_examples/llms/shared/infra/cache.py:16-67) -- aircc's link fails otherwise;
        writes "<output_binary_name>.elf" into the working directory (:429-437, :453) and
        returns XRTCompileArtifact(output_binary, "main:<instance_name>", insts) (:573-611)."""

        def __init__(self, **kwargs):
            unknown = set(kwargs) - set(XRT_BACKEND_DEFAULTS)
            if unknown:
                raise TypeError(f"XRTBackend.__init__() got an unexpected keyword argument "
                                f"{sorted(unknown)[0]!r}")
            self.kw = {**XRT_BACKEND_DEFAULTS, **kwargs}
            if isinstance(self.kw["omit_pingpong"], bool):                    # :300-304
                self.kw["omit_pingpong"] = "all" if self.kw["omit_pingpong"] else ""
            self.currently_loaded = False
            log.append(("XRTBackend", dict(kwargs)))

        def compile(self, air_module, output_binary_name="air", kernel="MLIR_AIE",
                    insts="air.insts.bin"):
            kw = self.kw
            target = kw["target_device"] if kw["target_device"] is not None else "npu1"
            if kw["output_format"] == "elf" and "npu1" in target:
                raise AirBackendError(f"output_format='elf' is not supported for {target} target.")
            # Peano: PEANO_INSTALL_DIR when it is a directory, else the llvm-aie package (:404-427)
            peano = os.environ.get("PEANO_INSTALL_DIR", "")
            if peano and not os.path.isdir(peano):
                peano = ""
            if not peano:
                try:
                    import importlib.metadata
                    cand = importlib.metadata.distribution("llvm-aie").locate_file("llvm-aie")
                    peano = os.path.abspath(cand) if os.path.isdir(cand) else ""
                except Exception:              # noqa: BLE001
                    peano = ""
            # aircc: resolve_tool, the wheel's bin/ first, then PATH (:559-563, tools.py:39-58)
            bundled = [Path(d).resolve().parents[1] / "bin" / "aircc" for d in air.__path__]
            if not any(b.is_file() for b in bundled) and not shutil.which("aircc"):
                raise AirBackendError(f"MLIR-AIR tool 'aircc' was not found at "
                                      f"{bundled[0] if bundled else '?'} or on PATH")
            text = str(air_module)
            with open("air.mlir", "w") as f:                       # :554-557
                f.write(text)
            opts = ["--device", target, "air.mlir"]
            opts += ["--elf-name", f"{output_binary_name}.elf"] if kw["output_format"] == "elf" \
                else ["-o", f"{output_binary_name}.xclbin", "-i", insts]
            opts += [f"--air-runtime-loop-tiling-sizes={s}" for s in kw["runtime_loop_tiling_sizes"]]
            if kw["omit_while_true_loop"]:
                opts += ["--omit-while-true-loop"]
            if kw["omit_pingpong"]:
                opts += [f"--omit-ping-pong-transform={kw['omit_pingpong']}"]
            opts += ["--output-format", kw["output_format"]]
            if kw["instance_name"]:
                opts += ["--xclbin-instance-name", kw["instance_name"]]
            opts += ["--peano", peano, "--no-xchesscc", "--no-xbridge"] if peano else \
                ["--xchesscc", "--xbridge"]                                  # :525-537
            if aircc_error is not None:
                log.append(("aircc", opts))
                raise AirBackendError(f"aircc compilation failed:\n{aircc_error}")
            for obj in sorted(set(re.findall(r'link_with = "([^"]+)"', text))):
                if not (os.path.isfile(obj) or os.path.isfile(os.path.join("air_project", obj))):
                    raise AirBackendError(f"aircc compilation failed:\nld.lld: error: unable to "
                                          f"find {obj}")
            funcs = re.findall(r"func\.func @(\w+)\(", text)
            meta = {"kernels": [f"main:{f}" for f in funcs], "module": text, "aircc": opts}
            out = f"{output_binary_name}.elf" if kw["output_format"] == "elf" else \
                f"{output_binary_name}.xclbin"
            with open(out, "wb") as f:
                f.write(ELF_MAGIC + json.dumps(meta).encode())
            log.append(("aircc", opts))
            name = f"main:{kw['instance_name']}" if kw["output_format"] == "elf" and \
                kw["instance_name"] else kernel
            return XRTCompileArtifact(out, name, insts)

        def unload(self):
            self.currently_loaded = False

    class Context:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    class Module:
        """air.ir.Module.parse(text); str() gives the text back (xrt.py:555)."""

        def __init__(self, text):
            self.text = text

        @staticmethod
        def parse(text):
            if not isinstance(text, str):
                raise TypeError("Module.parse(): incompatible function arguments")
            log.append(("parse", len(text)))
            return Module(text)

        def __str__(self):
            return self.text

    air = types.ModuleType("air")              # a namespace package: no __file__, no __version__
    air.__path__ = [str(air_dir)] if air_dir is not None else []
    air_ir = types.ModuleType("air.ir")
    air_ir.Context, air_ir.Module = Context, Module
    backend = types.ModuleType("air.backend")
    backend.__path__ = []
    xrt = types.ModuleType("air.backend.xrt")
    xrt.XRTBackend, xrt.XRTCompileArtifact, xrt.AirBackendError = \
        XRTBackend, XRTCompileArtifact, AirBackendError
    air.ir, air.backend, backend.xrt = air_ir, backend, xrt
    return {"air": air, "air.ir": air_ir, "air.backend": backend, "air.backend.xrt": xrt}


def fake_peano(root: Path) -> Path:
    """A Peano install: bin/clang++ answers --version and writes each -o object."""
    (root / "bin").mkdir(parents=True, exist_ok=True)
    clang = root / "bin" / "clang++"
    clang.write_text('#!/bin/sh\nif [ "$1" = "--version" ]; then echo "fake peano 1.0"; exit 0; '
                     'fi\nwhile [ $# -gt 1 ]; do if [ "$1" = "-o" ]; then echo obj > "$2"; fi; '
                     'shift; done\n')
    clang.chmod(clang.stat().st_mode | stat.S_IEXEC)
    return root


def install(monkeypatch, tmp_path: Path, log: list | None = None, aircc_error: str | None = None,
            **pyxrt_kw):
    """mlir-air (its wheel's files in tmp_path/site, on sys.path), pyxrt and Peano fakes in place
    for one test; returns the pyxrt fake."""
    log = log if log is not None else []
    site_dir = tmp_path / "site"
    air_dir = fake_air_wheel(site_dir)
    monkeypatch.syspath_prepend(str(site_dir))
    for name, mod in air_modules(log, air_dir, aircc_error).items():
        monkeypatch.setitem(sys.modules, name, mod)
    xrt = make_pyxrt(log, **pyxrt_kw)
    monkeypatch.setitem(sys.modules, "pyxrt", xrt)
    monkeypatch.setenv("PEANO_INSTALL_DIR", str(fake_peano(tmp_path / "peano")))
    return xrt
