"""Which CUDA this process gets: numba-cuda on an NVIDIA GPU, or numba-cuda's simulator.

numba decides once, when `numba` is first imported: with NUMBA_ENABLE_CUDASIM=1 in the
environment every `@cuda.jit` kernel runs on the CPU, each CUDA thread a Python thread (the
simulator); without it kernels are compiled to PTX by NVVM and launched through the driver. The
two cannot share a process, so `load(simulated)` sets the variable before the first import and
refuses, in one line, a process that already imported the other kind.

Nothing here is imported by `import llamanb`: the cuda backends call `load` when constructed.
"""
from __future__ import annotations

import os
import sys

from llamanb.errors import LlamanbError
from llamanb.platform.hardware import has_module


def numba_cuda_installed() -> bool:
    """numba-cuda's distribution is importable (its top package imports nothing of numba, so
    asking does not fix the simulator setting, which numba reads when first imported)."""
    return has_module("numba_cuda")


def load(simulated: bool):
    """numba.cuda, in simulator mode or on a GPU. LlamanbError (one line) naming what is missing."""
    if simulated and "numba" not in sys.modules:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
    if not numba_cuda_installed():
        raise LlamanbError("the cuda backends need numba-cuda: pip install 'llamanb[cuda]' "
                           "(numba-cuda; its simulator needs no GPU)")
    from numba import cuda
    from numba.core import config

    if bool(config.ENABLE_CUDASIM) != simulated:
        want, got = ("the simulator", "a GPU") if simulated else ("a GPU", "the simulator")
        raise LlamanbError(f"numba was already imported for {got} in this process; "
                           f"run {want} in a fresh process (NUMBA_ENABLE_CUDASIM is read once)")
    if simulated:
        from llamanb.cuda import sim_shared

        sim_shared.install()        # the simulator's shared-array allocation races without it
    if not simulated and not cuda.is_available():
        raise LlamanbError("backend 'cuda' needs an NVIDIA GPU and its driver; numba-cuda finds "
                           "no CUDA device here (backend 'cuda-simulated' runs the same kernels "
                           "in numba-cuda's simulator, tiny models only)")
    return cuda


def simulated_now() -> bool | None:
    """True/False once numba is imported in this process (simulator or not), else None."""
    if "numba" not in sys.modules:
        return None
    from numba.core import config

    return bool(config.ENABLE_CUDASIM)
