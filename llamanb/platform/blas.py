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
# Names as get_corename() spells them ("Sandybridge"), compared without case.
ROW_INVARIANT_CORES = {"skylakex", "cooperlake", "sapphirerapids", "sandybridge", "nehalem"}


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
ROW_ALIGN = {"haswell": 12, "zen": 12, "sandybridge": 1, "nehalem": 1}


@functools.lru_cache(maxsize=None)
def row_align() -> int:
    """The row offsets at which a GEMM computes a row the same way: a step that must give each
    sequence the bits it would get alone starts every sequence at a multiple of this."""
    core = (openblas_info().get("core") or "").casefold()
    if core in ROW_ALIGN:
        return ROW_ALIGN[core]
    return 8 if core in ROW_INVARIANT_CORES else 48


@functools.lru_cache(maxsize=None)
def row_multiple() -> int:
    """The GEMM row multiple at which every row is computed the same way (8 or 48, see above)."""
    return 8 if (openblas_info().get("core") or "").casefold() in ROW_INVARIANT_CORES else 48


# ---- a second kernel family, for the portability run ---------------------------------------------
#
# Stored notebook outputs and test tolerances must not depend on which kernels the CPU's BLAS (and
# torch) picked. `make test-portability` reruns the numerics-sensitive tests and notebooks with
# OpenBLAS forced to another kernel family this CPU can run (OPENBLAS_CORETYPE) and torch forced
# to another instruction set (ATEN_CPU_CAPABILITY): on an AVX-512 machine the AVX2 kernels, on an
# AVX2 machine the AVX (no FMA) ones. Any number that depends on the kernel shows up as a failure.
AVX512_CORES = {"skylakex", "cooperlake", "sapphirerapids"}
AVX2_CORES = {"haswell", "zen"}


def cpu_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> set[str]:
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def other_openblas_core(core: str | None = None, flags: set[str] | None = None) -> str:
    """An OpenBLAS kernel family other than `core` (default: the one numpy loaded) that a CPU
    with `flags` can run: AVX-512 -> Haswell, AVX2 -> Sandybridge, otherwise Nehalem."""
    core = (core if core is not None else openblas_info().get("core") or "").casefold()
    flags = cpu_flags() if flags is None else flags
    if core in AVX512_CORES and {"avx2", "fma"} <= flags:
        return "Haswell"
    if core in AVX2_CORES and "avx" in flags:
        return "Sandybridge"
    return "Nehalem"


def other_torch_capability(native: str) -> str:
    """ATEN_CPU_CAPABILITY for torch's kernels one step below `native` (AVX512 -> avx2, else default)."""
    return "avx2" if native.upper().startswith("AVX512") else "default"


def numpy_disabled_features() -> str:
    """NPY_DISABLE_CPU_FEATURES that moves numpy's own vector loops (exp, sin, cos, sums) one
    level down: without the AVX-512 targets where they run, else without AVX2 (x86-64-v3)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:
        return ""
    on = [f for f in __cpu_dispatch__ if __cpu_features__.get(f)]
    avx512 = [f for f in on if f == "X86_V4" or f.startswith("AVX512")]
    return " ".join(avx512 or [f for f in on if f == "X86_V3"])


def portability_env() -> dict[str, str]:
    """The environment of the portability run: numpy's BLAS, numpy's own loops and torch each on
    a second kernel family this CPU can run."""
    env = {"OPENBLAS_CORETYPE": other_openblas_core()}
    off = numpy_disabled_features()
    if off:
        env["NPY_DISABLE_CPU_FEATURES"] = off
    try:
        import torch

        env["ATEN_CPU_CAPABILITY"] = other_torch_capability(torch.backends.cpu.get_cpu_capability())
    except ImportError:
        pass
    return env

