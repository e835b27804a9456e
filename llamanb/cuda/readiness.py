"""Can this machine run the cuda track on a GPU? What it lacks, one phrase each."""
from __future__ import annotations

from pathlib import Path

from llamanb.platform.hardware import has_module


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
