"""Can this machine run the NPU2 track on hardware? What a real NPU2 run lacks, one phrase each."""
from __future__ import annotations

from pathlib import Path

from llamanb.platform.hardware import amd_npu_devices, has_module


def peano_found() -> bool:
    """Peano where mlir-air's XRTBackend looks (llamanb.npu.locate.find_peano: $PEANO_INSTALL_DIR,
    else the llvm-aie wheel; Xilinx/mlir-air python/air/backend/xrt.py:129-157, 404-427) -- the same
    lookup the compile path uses, so `info` and `npu compile` agree."""
    from llamanb.npu.locate import find_peano

    return bool(find_peano())


def npu2_missing(module=has_module, devices=amd_npu_devices, tool=None,
                 peano=peano_found) -> tuple[str, ...]:
    """What a real NPU2 run lacks here: pyxrt, mlir-air (air.ir and air.backend.xrt, as the compile
    path imports them), aircc and Peano where mlir-air finds them, and a usable amdxdna device node
    (llamanb.npu.locate says which: no node, another driver, no /dev node, no permission). `tool`,
    `peano` and `devices` are stand-ins for tests."""
    from llamanb.npu import locate

    missing = []
    if not module("pyxrt"):
        missing.append("python module pyxrt (XRT's bindings: source /opt/xilinx/xrt/setup.sh, "
                       "then make it visible to this venv, see README)")
    if not (module("air") and module("air.ir") and module("air.backend.xrt")):
        missing.append("python modules air.ir and air.backend.xrt (mlir-air)")
    if tool is not None:
        if not tool("aircc"):
            missing.append("the aircc compiler on PATH (mlir-air)")
    elif not (aircc := locate.find_aircc()):
        missing.append(aircc.missing)
    if not peano():
        missing.append(locate.find_peano().missing if peano is peano_found
                       else "Peano (PEANO_INSTALL_DIR or the llvm-aie package)")
    if devices is amd_npu_devices:
        missing.extend(locate.device_missing())
    elif not devices():
        missing.append("a /dev/accel/accel* node bound to the amdxdna driver")
    return tuple(missing)
