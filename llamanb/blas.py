"""The BLAS numpy uses: which OpenBLAS kernel family runs the GEMMs, and what follows from it.

A backend that promises bit-identical rows whatever the row count (padded prefill, chunked prefill,
batched steps) must know the row multiples at which its BLAS computes each row of a GEMM the same
way. That fact belongs to the BLAS, not to a cache or a benchmark, so it lives here.
"""
from __future__ import annotations

import ctypes
import functools
from pathlib import Path

# Row counts at which OpenBLAS computes each row of a GEMM identically whatever the row count.
# Measured with OPENBLAS_CORETYPE on every kernel family below (1-16 threads): these cores give
# bit-identical rows for any count >= 8 (below that a small-matrix kernel takes over); the Haswell
# and Zen kernels (most laptops without AVX-512) only for multiples of 48 (edge rows of their
# 24-row blocks, split over two threads, use other micro-kernels). Unknown BLAS: 48.
ROW_INVARIANT_CORES = {"SkylakeX", "Cooperlake", "SapphireRapids", "SandyBridge", "Nehalem"}


def openblas_info() -> dict:
    """Thread count and kernel family of the OpenBLAS that numpy loaded (via its C API)."""
    paths = set()
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower() and "/" in line}
    except OSError:
        pass
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        for prefix, suffix in (("scipy_openblas_", "64_"), ("openblas_", "64_"), ("openblas_", "")):
            try:
                threads = getattr(lib, f"{prefix}get_num_threads{suffix}")
                corename = getattr(lib, f"{prefix}get_corename{suffix}")
            except AttributeError:
                continue
            corename.restype = ctypes.c_char_p
            return {"library": Path(path).name, "threads": int(threads()),
                    "core": corename().decode()}
    return {"library": None, "threads": None, "core": None}



# Where a row sits in the GEMM matters too. The Haswell and Zen kernels (measured on AMD EPYC and
# with OPENBLAS_CORETYPE=Haswell/Zen, 1 and 2 threads) give a row the same bits only at offsets
# that are multiples of 12 (their micro-kernel's row block); SandyBridge and Nehalem at any
# offset. Unknown kernels: 48, which is safe wherever the row multiple is.
ROW_ALIGN = {"Haswell": 12, "Zen": 12, "SandyBridge": 1, "Nehalem": 1}


@functools.lru_cache(maxsize=None)
def row_align() -> int:
    """The row offsets at which a GEMM computes a row the same way: a step that must give each
    sequence the bits it would get alone starts every sequence at a multiple of this."""
    core = openblas_info().get("core")
    if core in ROW_ALIGN:
        return ROW_ALIGN[core]
    return 8 if core in ROW_INVARIANT_CORES else 48


@functools.lru_cache(maxsize=None)
def row_multiple() -> int:
    """The GEMM row multiple at which every row is computed the same way (8 or 48, see above)."""
    return 8 if openblas_info().get("core") in ROW_INVARIANT_CORES else 48
