"""What this machine can run: the numpy reference always; an AMD NPU or a Tenstorrent card only when
both the software stack and the device are present.

Nothing is imported here: `importlib.util.find_spec` looks a module up without running it, and
device nodes are checked on the filesystem. The hardware backends import their stacks lazily,
when one is actually asked for, so `import llamanb` works on any laptop.

    AMD NPU2 (XDNA 2)   python: pyxrt (XRT bindings) + air (mlir-air)   device: /dev/accel/accel*
                        bound to the amdxdna driver
    Tenstorrent         python: ttnn                                    device: /dev/tenstorrent/*
"""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Target:
    name: str
    modules: dict[str, bool]            # python module -> importable
    devices: list[str] = field(default_factory=list)
    needs_device: bool = True

    @property
    def software(self) -> bool:
        return all(self.modules.values())

    @property
    def usable(self) -> bool:
        return self.software and (bool(self.devices) or not self.needs_device)

    def summary(self) -> str:
        mods = ", ".join(f"{m} {'found' if ok else 'absent'}" for m, ok in self.modules.items())
        if not self.needs_device:
            dev = "runs on the CPU"
        else:
            dev = f"device {', '.join(self.devices)}" if self.devices else "no device"
        verdict = "present" if self.usable else "absent"
        return f"{self.name:<22} {verdict:<8} ({mods}; {dev})"


def has_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def amd_npu_devices(root: Path = Path("/sys/class/accel")) -> list[str]:
    """/dev/accel/accelN nodes whose driver is amdxdna (the Ryzen AI NPU driver)."""
    found = []
    for node in sorted(root.glob("accel*")) if root.is_dir() else []:
        driver = node / "device" / "driver"
        if driver.exists() and driver.resolve().name == "amdxdna":
            found.append(f"/dev/accel/{node.name}")
    return found


def tenstorrent_devices(root: Path = Path("/dev/tenstorrent")) -> list[str]:
    return [str(p) for p in sorted(root.iterdir())] if root.is_dir() else []


def probe() -> list[Target]:
    return [
        Target("numpy (reference)", {"numpy": has_module("numpy")}, needs_device=False),
        Target("AMD NPU2 (MLIR-AIR)", {"pyxrt": has_module("pyxrt"), "air": has_module("air")},
               amd_npu_devices()),
        Target("Tenstorrent (ttnn)", {"ttnn": has_module("ttnn")}, tenstorrent_devices()),
    ]


def report() -> str:
    return "\n".join(t.summary() for t in probe())


# ---------------------------------------------------------------- readiness, backend by backend

@dataclass(frozen=True)
class Readiness:
    """Can this machine run backend `name`? `missing` lists what it lacks, one short phrase each
    (empty when ready); `runs_on` says where its arithmetic happens: "host CPU", "emulated" (a
    device simulated on the host CPU, said in its output) or "device" (real hardware)."""
    name: str
    runs_on: str
    missing: tuple[str, ...] = ()
    note: str = ""

    @property
    def ready(self) -> bool:
        return not self.missing

    @property
    def emulated(self) -> bool:
        return self.runs_on == "emulated"

    def line(self) -> str:
        state = "ready" if self.ready else "not ready, missing: " + "; ".join(self.missing)
        return f"{self.name:<18} {self.runs_on:<9} {state}" + (f" -- {self.note}" if self.ready and self.note else "")


def peano_found() -> bool:
    """Peano (llvm-aie) where mlir-air's XRTBackend looks: $PEANO_INSTALL_DIR, else the llvm-aie
    distribution (Xilinx/mlir-air python/air/backend/xrt.py:129-157, 404-427)."""
    import os
    from pathlib import Path

    root = os.environ.get("PEANO_INSTALL_DIR", "")
    if root:
        return (Path(root) / "bin" / "clang++").is_file()
    try:
        import importlib.metadata as md
        return Path(str(md.distribution("llvm-aie").locate_file("llvm-aie"))).is_dir()
    except Exception:          # noqa: BLE001 - not installed
        return False


def npu2_missing(module=has_module, devices=amd_npu_devices, tool=None,
                 peano=peano_found) -> tuple[str, ...]:
    """What a real NPU2 run lacks here: pyxrt, mlir-air (air.ir and air.backend.xrt, as the compile
    path imports them), the aircc binary, Peano, and the amdxdna device node."""
    import shutil

    tool = tool or shutil.which
    missing = []
    if not module("pyxrt"):
        missing.append("python module pyxrt (XRT's bindings: source /opt/xilinx/xrt/setup.sh, "
                       "then make it visible to this venv, see README)")
    if not (module("air") and module("air.ir") and module("air.backend.xrt")):
        missing.append("python modules air.ir and air.backend.xrt (mlir-air)")
    if not tool("aircc"):
        missing.append("the aircc compiler on PATH (mlir-air)")
    if not peano():
        missing.append("Peano (PEANO_INSTALL_DIR or the llvm-aie package)")
    if not devices():
        missing.append("a /dev/accel/accel* node bound to the amdxdna driver")
    return tuple(missing)


def ttnn_missing(module=has_module, devices=tenstorrent_devices,
                 python: tuple[int, int] | None = None) -> tuple[str, ...]:
    """What a real Tenstorrent run lacks here: ttnn (wheels for CPython 3.10/3.12 only) and a card."""
    import sys

    python = python or sys.version_info[:2]
    missing = []
    if not module("ttnn"):
        hint = "" if python in ((3, 10), (3, 12)) else (
            f"; its wheels are for CPython 3.10/3.12, this is {python[0]}.{python[1]}")
        missing.append(f"python module ttnn{hint}")
    if not devices():
        missing.append("a /dev/tenstorrent/* device node (a card and its driver); without a card, "
                       "tenstorrent/ttsim (TT_METAL_SIMULATOR) plus the SFPI kernel compiler, which "
                       "the ttnn wheel lacks (a GitHub release download: tt-lang's ttl/_setup/sfpi.py)")
    return tuple(missing)


def ttlang_sim_missing(module=has_module) -> tuple[str, ...]:
    """TT-Lang kernels on Tenstorrent's functional simulator need only the tt-lang-sim wheel."""
    return () if module("ttl") and module("sim_stats") else (
        "python package tt-lang-sim (pip install tt-lang-sim; the ttlang extra)",)


from .cxx_build import CXX_CANDIDATES, find_cxx  # noqa: E402,F401 -- the one lookup, re-exported


def cpu_compiler_missing() -> tuple[str, ...]:
    """The compiled cpu backend needs a C++ compiler: what find_cxx() did not find, if anything."""
    path, why = find_cxx()
    return () if path else (why,)


def cuda_missing(module=has_module, driver=None) -> tuple[str, ...]:
    """What backend 'cuda' lacks here: numba-cuda and an NVIDIA GPU with its driver (a
    /dev/nvidia* node and libcuda). `driver` stands in for the device probe in tests."""
    import ctypes.util

    missing = []
    if not module("numba_cuda"):
        missing.append("python module numba-cuda (pip install 'llamanb[cuda]')")
    has_gpu = driver() if driver else (bool(list(Path("/dev").glob("nvidia[0-9]*")))
                                       and ctypes.util.find_library("cuda") is not None)
    if not has_gpu:
        missing.append("an NVIDIA GPU and its driver (/dev/nvidia*, libcuda)")
    return tuple(missing)


def furiosa_tool(name: str) -> bool:
    """A furiosa-tcc-style executable: beside this Python (a venv's bin/) or on PATH."""
    import os
    import shutil
    import sys

    here = Path(sys.executable).parent / name
    return (here.is_file() and os.access(here, os.X_OK)) or shutil.which(name) is not None


def tcp_compiler_missing(module=has_module, tool=furiosa_tool) -> tuple[str, ...]:
    """Furiosa's compiler on the block (llamanb.tcp.compiler): furiosa-tcc and furiosa-kernels."""
    missing = []
    if not tool("furiosa-tcc"):
        missing.append("furiosa-tcc (pip install furiosa-tcc)")
    if not module("furiosa.tcl"):
        missing.append("python module furiosa.tcl (pip install furiosa-kernels)")
    return tuple(missing)


def tcp_compiler_note(tool=furiosa_tool) -> str:
    edf = ("EDF binaries too (aarch64-linux-gnu-gcc present)" if tool("aarch64-linux-gnu-gcc") else
           "no EDF binaries: aarch64-linux-gnu-gcc missing (apt-get install gcc-aarch64-linux-gnu)")
    return "furiosa-tcc cycle estimates for the block's TCL kernels; " + edf


def readiness(module=has_module, npu_devices=amd_npu_devices,
              tt_devices=tenstorrent_devices, tool=furiosa_tool) -> list[Readiness]:
    """Every registered backend, in the order the course introduces them, with what it lacks.
    The probes are arguments so that tests can stand in for modules and device nodes."""
    from .backends import BACKENDS, LAZY

    rows = [Readiness("numpy", "host CPU", note="the reference engine")]
    if "cpu" in {**BACKENDS, **LAZY}:
        rows.append(Readiness("cpu", "host CPU", cpu_compiler_missing(),
                              "the course's C++ kernels compiled for this CPU"))
    rows += [
        Readiness("npu2-emulated", "emulated", note="the stitched MLIR-AIR groups, run on the host"),
        Readiness("npu2", "device", npu2_missing(module, npu_devices), "AMD NPU2 through XRT"),
        Readiness("tcp", "emulated", note="Furiosa's TCP einsum program, interpreted on the host"),
        Readiness("tcp-compiler", "host CPU", tcp_compiler_missing(module, tool), tcp_compiler_note(tool)),
        Readiness("galaxy-emulated", "emulated", note="a Tenstorrent mesh of numpy devices"),
        Readiness("galaxy-ttnn", "device", ttnn_missing(module, tt_devices),
                  "every op a ttnn call on a Tenstorrent device"),
        Readiness("galaxy-ttlang-sim", "emulated", ttlang_sim_missing(module),
                  "the mesh's matmuls as TT-Lang kernels on tt-lang-sim (simulated)"),
    ]
    if "cuda" in {**BACKENDS, **LAZY}:
        rows += [Readiness("cuda-simulated", "emulated",
                           () if module("numba_cuda") else ("python module numba-cuda (pip install "
                                                            "'llamanb[cuda]')",),
                           "numba-cuda's simulator: every CUDA thread a Python thread, tiny "
                           "models only"),
                 Readiness("cuda", "device", cuda_missing(module),
                           "the CUDA kernels on an NVIDIA GPU (untested on hardware so far)")]
    return rows


def readiness_report(rows: list[Readiness] | None = None) -> str:
    return "\n".join(r.line() for r in (rows if rows is not None else readiness()))
