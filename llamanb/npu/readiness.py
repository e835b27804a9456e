"""Can this machine run the NPU2 track on hardware? What a real NPU2 run lacks, one phrase each."""
from __future__ import annotations

from pathlib import Path

from llamanb.platform.hardware import amd_npu_devices, has_module


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
