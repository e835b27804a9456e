"""The cpu backend's C++ kernels (kernels/cpu/*.cc): built once into the cache, bound with ctypes.

    kernels/cpu/*.cc, *.h --g++ -O3 -march=native -pthread--> $LLAMANB_CACHE/cpu/cpu-kernels-<key>.so

The build machinery is the NPU host build's (llamanb.npu.hostbuild): the key hashes the sources,
the flags and `g++ --version`, and the library is written to a temporary file and renamed into
place. `-march=native` targets this CPU (AVX2 / AVX-512 where it has them); the flags carry a
digest of the CPU's model and feature list, so a cache shared between machines never hands one
CPU another's build. A compiler that refuses `-march=native` gets the portable flags (same code,
the compiler's default instruction set). `-ffp-contract=fast` lets multiply-adds fuse.

    LLAMANB_CXX   the compiler (default g++); "none" turns builds off

Threads: the kernels' own pool (kernels/cpu/pool.h), one thread per core this process may use, or
$LLAMANB_THREADS. The calling thread works too and never waits for a helper that has not started,
so a busy, shared machine slows the kernels down instead of stalling them.
"""
from __future__ import annotations

import ctypes
import hashlib
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..errors import LlamanbError
from ..npu import hostbuild

KERNELS_DIR = Path(__file__).resolve().parents[2] / "kernels" / "cpu"
BASE_FLAGS = ("-std=c++20", "-O3", "-ffp-contract=fast", "-pthread", "-shared", "-fPIC",
              "-Wall", "-Wextra")


def _cpu_digest() -> str:
    """A short digest of this CPU's model name and feature flags (Linux; "unknown" elsewhere)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    keep = [ln for ln in text.splitlines() if ln.split(":")[0].strip() in ("model name", "flags",
                                                                           "Features")]
    return hashlib.sha256("\n".join(sorted(set(keep))).encode()).hexdigest()[:12]


def native_flags() -> tuple[str, ...]:
    return BASE_FLAGS + ("-march=native", f"-DLLAMANB_CPU_HOST={_cpu_digest()}")


def portable_flags() -> tuple[str, ...]:
    return BASE_FLAGS


def cache_dir() -> Path:
    from ..paths import cache_root

    return cache_root() / "cpu"


class Dims(ctypes.Structure):
    """kernels/cpu/forward.cc's Dims: the model's sizes and the step's numerics."""
    _fields_ = [(n, ctypes.c_int32) for n in ("L", "H", "n_heads", "n_kv", "d", "F", "wbf16", "rnd")] + \
        [("eps", ctypes.c_float), ("scale", ctypes.c_float)]


class Seg(ctypes.Structure):
    """forward.cc's Seg: rows row .. row+n-1 of the step are positions start .. of `slot`, whose
    positions lie in the blocks `table` lists (int32, position order)."""
    _fields_ = [(n, ctypes.c_int32) for n in ("row", "n", "start", "slot")] + \
        [("table", ctypes.c_void_p)]


class CacheDesc(ctypes.Structure):
    """forward.cc's Cache: float32 k, v as a pool of blocks [n_blocks, L, N_kv, block, d]
    (strides in floats)."""
    _fields_ = [("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("block_stride", ctypes.c_int64),
                ("layer_stride", ctypes.c_int64), ("head_stride", ctypes.c_int64),
                ("block", ctypes.c_int32)]


class Packed:
    """A weight W [n, k] packed for the matmul kernel: `data` [ceil(n / NP), k, NP] float32 or
    uint16 (bfloat16 bits)."""

    def __init__(self, n: int, k: int, data: np.ndarray):
        self.n, self.k, self.data = n, k, data
        self.bf16 = data.dtype == np.uint16

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    @property
    def shape(self) -> tuple[int, int]:
        return self.n, self.k


class Kernels:
    """The loaded library with typed entry points; arrays must be C-contiguous float32 (uint16
    for bf16 weights) unless a stride is passed."""

    def __init__(self, lib: ctypes.CDLL, built: hostbuild.HostBuild, native: bool):
        self.lib, self.built, self.native = lib, built, native
        P, I, L, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_float
        sig = {"llamanb_cpu_matmul_f32": (P, I, I, P, I, P, I, I),
               "llamanb_cpu_pack_f32": (P, I, I, P),
               "llamanb_cpu_pack_bf16": (P, I, I, P),
               "llamanb_cpu_forward": (P, P, P, I, P, P, P, I, P),
               "llamanb_cpu_panel_width": (),
               "llamanb_cpu_bf16_unpack_order": (),
               "llamanb_cpu_matmul_bf16": (P, I, I, P, I, P, I, I),
               "llamanb_cpu_rmsnorm": (P, P, P, I, I, F, I),
               "llamanb_cpu_rope": (P, I, L, I, I, P, P, I),
               "llamanb_cpu_silu_mul": (P, P, I, I, I),
               "llamanb_cpu_attention": (P, L, I, I, I, I, I, P, P, L, P, F, I),
               "llamanb_cpu_read_sum": (P, L),
               "llamanb_cpu_vector_width": (),
               "llamanb_cpu_threads": ()}
        for name, args in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = list(args), (ctypes.c_int if name.endswith(("width", "threads", "order")) else
                                                   ctypes.c_double if name.endswith("_sum") else None)
        self.vector_width = lib.llamanb_cpu_vector_width()
        self.panel_width = lib.llamanb_cpu_panel_width()
        # how this build lays out packed weights (a cached copy must have been packed alike)
        self.layout = f"np{self.panel_width}" + ("-bf16u" if lib.llamanb_cpu_bf16_unpack_order() else "")
        self.threads = lib.llamanb_cpu_threads()

    def pack(self, w: np.ndarray, bf16: bool = False) -> Packed:
        """W [N, K] -> panels [ceil(N / NP), K, NP] (kernels/cpu/matmul.cc), float32 or bfloat16
        bits (rounded to nearest even); NP = this build's panel width."""
        w = np.ascontiguousarray(w, dtype=np.float32)
        N, K = w.shape
        NP = self.panel_width
        data = np.empty((-(-N // NP), K, NP), dtype=np.uint16 if bf16 else np.float32)
        fn = self.lib.llamanb_cpu_pack_bf16 if bf16 else self.lib.llamanb_cpu_pack_f32
        fn(w.ctypes.data, N, K, data.ctypes.data)
        return Packed(N, K, data)

    # y [M, N] (+)= x [M, K] @ W[N, K]^T
    def matmul(self, x: np.ndarray, w: Packed, y: np.ndarray, accumulate: bool = False,
               rnd: bool = False) -> np.ndarray:
        M, K = x.shape
        N = w.n
        assert w.k == K and y.shape == (M, N) and x.flags.c_contiguous and y.flags.c_contiguous
        fn = self.lib.llamanb_cpu_matmul_bf16 if w.bf16 else self.lib.llamanb_cpu_matmul_f32
        fn(x.ctypes.data, M, K, w.data.ctypes.data, N, y.ctypes.data, int(accumulate), int(rnd))
        return y

    def read_sum(self, a: np.ndarray) -> float:
        """The float64 sum of a float32 array, read by every pool thread (a bandwidth probe)."""
        a = np.ascontiguousarray(a, dtype=np.float32)
        return self.lib.llamanb_cpu_read_sum(a.ctypes.data, a.size)

    def rmsnorm(self, x: np.ndarray, w: np.ndarray, eps: float, rnd: bool = False) -> np.ndarray:
        out = np.empty_like(x)
        self.lib.llamanb_cpu_rmsnorm(x.ctypes.data, w.ctypes.data, out.ctypes.data, x.shape[0],
                                     x.shape[1], eps, int(rnd))
        return out


@lru_cache(maxsize=None)
def _load(kernels_dir: Path, cache: Path) -> Kernels | str:
    for flags, native in ((native_flags(), True), (portable_flags(), False)):
        built = hostbuild.build(kernels_dir, cache, flags, "cpu-kernels")
        if built is not None:
            return Kernels(ctypes.CDLL(str(built.path)), built, native)
    return hostbuild.reason(kernels_dir, portable_flags()) or "the build failed"


def built(kernels_dir: Path = KERNELS_DIR) -> bool:
    """Whether load() finds its library in the cache already (False: it will compile first)."""
    cxx, _ = hostbuild.compiler()
    if cxx is None:
        return False
    return any((cache_dir() / f"cpu-kernels-{hostbuild.build_key(cxx, Path(kernels_dir), f)[:24]}.so")
               .is_file() for f in (native_flags(), portable_flags()))


def load(kernels_dir: Path = KERNELS_DIR) -> Kernels:
    """The kernels, built at first use; a LlamanbError (one line, naming the numpy backend)
    when they cannot be built here."""
    cxx, why = hostbuild.compiler()
    if cxx is None:
        raise LlamanbError(f"backend 'cpu' compiles C++ at first use, but {why} "
                           "(set LLAMANB_CXX, or use --backend numpy)")
    got = _load(Path(kernels_dir), cache_dir())
    if isinstance(got, str):
        raise LlamanbError(f"backend 'cpu': {got} (use --backend numpy)")
    return got
