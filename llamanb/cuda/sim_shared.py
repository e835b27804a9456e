"""numba-cuda's simulator, its `cuda.shared.array` made atomic: one buffer per source line for all
the threads of a launch, whatever order the interpreter runs them in.

The simulator gives the threads of a launch one buffer per `cuda.shared.array` source line,
allocated by the first thread that asks (numba-cuda 0.30.4,
numba_cuda/numba/cuda/simulator/kernelapi.py:127-136, `FakeCUDAShared.array`):

        stack = traceback.extract_stack(sys._getframe())
        caller = stack[-2][0:2]
        res = self._allocations.get(caller)
        if res is None:
            res = np.empty(shape, dtype)
            self._allocations[caller] = res
        return res

A check, then a store, with no lock, run by every thread of the block -- and every simulated CUDA
thread is a Python thread. When the interpreter switches threads between the `get` and the store,
two threads of the launch's first block both find no buffer, each allocates one, and the later
store wins: the thread left holding the other buffer writes its part of the tile (its lane's
partial sum, its q element, its candidate) where no other thread reads it, and the block reads
np.empty's leftover bytes in its place. The output of that block is then wrong by anything from
nothing (recycled memory that happens to hold the same values) to NaN. It is not a race in the
kernels: a GPU gives a block one shared allocation before any thread runs (the CUDA C++ twin,
kernels/cuda/llama_kernels.cu, declares them `__shared__`), and each kernel writes every shared
slot it reads, and reads it only after a barrier. It shows rarely: chapter 12's tiny Llama failed
its accuracy check once in eight builds on a loaded machine. With `sys.setswitchinterval(1e-6)`
and every launch of that chapter cell run twice on the same inputs, 12 launches over 47 runs gave
two different outputs, always in block 0 (of rmsnorm, qkt, softmax_rows, softmax_v), and 5 runs
failed the check; tests/cuda/test_cuda_sim_shared.py makes it happen at will by widening the
window.

`install()` replaces the method with the same lookup under a lock (the dynamic-shared-memory
path, shape 0, which reads no caller frame, is left to the original). The key stays upstream's:
the calling frame's file and line, so two allocations on one line still share a buffer, as the
simulator documents. `runtime.load(simulated=True)` installs it.
"""
from __future__ import annotations

import sys
import threading

_LOCK = threading.Lock()
_MODULES = ("numba.cuda.simulator.kernelapi", "numba_cuda.numba.cuda.simulator.kernelapi")


def _atomic_array(original, kernelapi):
    def array(self, shape, dtype, alignment=None):
        if alignment is not None or shape == 0:
            return original(self, shape, dtype, alignment)  # raises / dynamic: no caller frame
        if isinstance(dtype, kernelapi.types.Type):
            dtype = kernelapi.numpy_support.as_dtype(dtype)
        frame = sys._getframe(1)                  # upstream: extract_stack(...)[-2][0:2]
        caller = (frame.f_code.co_filename, frame.f_lineno)
        with _LOCK:
            res = self._allocations.get(caller)
            if res is None:
                res = kernelapi.np.empty(shape, dtype)
                self._allocations[caller] = res
        return res

    array.llamanb_atomic = True
    array.__doc__ = original.__doc__
    return array


def install() -> list[str]:
    """Patch FakeCUDAShared.array in every loaded copy of the simulator's kernelapi (numba-cuda
    registers its package under `numba.cuda` too, and the two names are two module objects; the
    kernels run on `numba.cuda`'s). Idempotent; returns the modules patched this call."""
    import importlib

    importlib.import_module(_MODULES[0])          # the simulator the kernels run on
    patched = []
    for name in _MODULES:
        mod = sys.modules.get(name)
        cls = getattr(mod, "FakeCUDAShared", None)
        if cls is None or getattr(cls.array, "llamanb_atomic", False):
            continue
        cls.array = _atomic_array(cls.array, mod)
        patched.append(name)
    return patched


def installed() -> bool:
    """Is the simulator the kernels run on (numba.cuda's) patched?"""
    mod = sys.modules.get(_MODULES[0])
    cls = getattr(mod, "FakeCUDAShared", None)
    return cls is not None and getattr(cls.array, "llamanb_atomic", False)
