"""The cpu backend's C++ kernels (kernels/cpu/*.cc): built once into the cache, bound with ctypes.

    kernels/cpu/*.cc, *.h --g++ -O3 -march=<flavour> -pthread--> $LLAMANB_CACHE/cpu/cpu-kernels-<key>.so

The build machinery is llamanb.platform.cxx_build's (shared with the NPU host build): the key hashes the
sources, the flags and `g++ --version`, and the library is written to a temporary file and renamed
into place. Which instructions the kernels use is decided at build time, from what the compiler
targets (`__AVX2__`, `__AVX512F__`, ... in kernels/cpu/vec.h), and the target is the build's
flavour:

    LLAMANB_CPU_MARCH=native     (default) -march=native: this CPU's own instruction set (AVX2 or
                                 AVX-512 where it has them); the flags carry a digest of the CPU's
                                 model and feature list, so a cache shared between machines never
                                 hands one CPU another's build. A compiler that refuses
                                 -march=native gets the portable flags.
    LLAMANB_CPU_MARCH=portable   no -march: the compiler's default target (x86-64: SSE2), the
                                 same source through its generic vector code
    LLAMANB_CPU_MARCH=<name>     -march=<name>, e.g. x86-64-v3 to force the AVX2 kernels on an
                                 AVX-512 machine. A target that needs instructions this CPU
                                 lacks (x86-64-v4 on an AVX2 CPU) is refused in one line before
                                 anything is loaded: it would build, then die with SIGILL
    LLAMANB_CPU_MARCH=avx512-simde
                                 the AVX-512 kernels on an AVX2 CPU, emulated: -march=x86-64-v3
                                 with every _mm512 intrinsic carried out by SIMDe (Debian's
                                 libsimde-dev; kernels/cpu/vec.h). Their results and panel
                                 layout are an AVX-512 build's; their speed is nobody's, so the
                                 bench refuses them. For checking the AVX-512 paths on a machine
                                 without AVX-512
    LLAMANB_CPU_MARCH=vnni256-simde
                                 the AVX2 kernels with their byte dot products by the 256-bit
                                 vpdpbusd (AVX-VNNI, AVX512VL) on a CPU without it, emulated the
                                 same way (kernels/cpu/vec.h): a VNNI build's results, nobody's
                                 speed. (The 512-bit vpdpbusd runs in avx512-simde, and natively
                                 wherever the compiler targets AVX512-VNNI or AVX-VNNI)

The flavour is part of the flags, hence of the key: each flavour is its own cached library.
`-ffp-contract=fast` lets multiply-adds fuse.

    LLAMANB_CXX   the compiler (default g++); "none" turns builds off

Threads: the kernels' own pool (kernels/cpu/pool.h), one thread per core this process may use, or
$LLAMANB_THREADS. The calling thread works too and never waits for a helper that has not started,
so a busy, shared machine slows the kernels down instead of stalling them.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path

import numpy as np

from llamanb.cpu.dtypes import QUANT_FORMATS
from llamanb.errors import LlamanbError
from llamanb.platform.progress import stages
from llamanb.platform import cxx_build

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


THREADS_VAR = "LLAMANB_THREADS"
MAX_THREADS = 1024          # kernels/cpu/pool.cc starts one thread per count, unchecked


def threads_from_env() -> int | None:
    """$LLAMANB_THREADS as the kernels' pool will read it (None: unset or blank, one thread per
    core this process may use). kernels/cpu/pool.cc reads it with atoi, which takes "abc" for 0
    (every core, silently) and "100000" for 100,000 threads: anything but an integer from 1 to
    MAX_THREADS is a one-line LlamanbError, here, before the pool starts."""
    value = os.environ.get(THREADS_VAR)
    if value is None or not value.strip():
        return None
    try:
        n = int(value)
    except ValueError:
        n = 0
    if not 1 <= n <= MAX_THREADS:
        raise LlamanbError(f"{THREADS_VAR} must be an integer from 1 to {MAX_THREADS} (threads "
                           f"for the cpu backend, the caller included), got {value!r}; unset it "
                           "for the cores this process may use")
    return n


MARCH_VAR = "LLAMANB_CPU_MARCH"
_MARCH_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]{0,40}$")


def native_flags() -> tuple[str, ...]:
    return BASE_FLAGS + ("-march=native", f"-DLLAMANB_CPU_HOST={_cpu_digest()}")


def portable_flags() -> tuple[str, ...]:
    return BASE_FLAGS


def check_flavour(value: str, where: str = MARCH_VAR) -> str:
    """`value` if it is "native", "portable" or something -march could name; else a one-line
    LlamanbError that names `where` it came from."""
    if not _MARCH_NAME.match(value):
        raise LlamanbError(f"{where}={value!r} is not native, portable or a -march name "
                           "(such as x86-64-v3)")
    return value


def flavour() -> str:
    """The build flavour $LLAMANB_CPU_MARCH asks for: "native" (default), "portable", or a
    -march name; anything else is a one-line LlamanbError."""
    return check_flavour(os.environ.get(MARCH_VAR, "").strip() or "native")


# the /proc/cpuinfo flag of each ISA_MACROS entry: what a CPU must have to run such a build
CPU_FLAG = {"SSE2": "sse2", "AVX": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c",
            "AVX512F": "avx512f", "AVX512BW": "avx512bw", "AVX512BF16": "avx512_bf16"}


def cpu_flags() -> set[str] | None:
    """This CPU's feature flags as Linux lists them (x86: the `flags` line of /proc/cpuinfo);
    None where there is no such list."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    flags = {f for ln in text.splitlines() if ln.startswith("flags")
             for f in ln.split(":", 1)[1].split()}
    return flags or None


@lru_cache(maxsize=None)
def target_macros(name: str) -> tuple[str, ...] | None:
    """The ISA_MACROS the compiler defines for flavour `name` (asked of the compiler itself:
    `-dM -E` of an empty file with the flavour's flags), None when it cannot say (no compiler,
    or a -march it does not know: the build will then say why)."""
    import subprocess

    cxx, _ = cxx_build.compiler()
    if cxx is None:
        return None
    flags = [f for f in flavour_flags(name) if f.startswith(("-m", "-std"))]
    try:
        out = subprocess.run([cxx, *flags, "-dM", "-E", "-x", "c++", os.devnull],
                             capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    if out.returncode != 0:
        return None
    defined = {ln.split()[1] for ln in out.stdout.splitlines() if ln.startswith("#define ")}
    return tuple(m for m in ISA_MACROS if f"__{m}__" in defined)


def missing_here(name: str) -> list[str]:
    """The instruction sets a build of flavour `name` would use that this CPU lacks (by its
    /proc/cpuinfo flags): [] for native, or where either side cannot be read."""
    if name == "native":
        return []
    have, uses = cpu_flags(), target_macros(name)
    if have is None or uses is None:
        return []
    return [m for m in uses if CPU_FLAG[m] not in have]


# the flavour that runs the AVX-512 code paths through SIMDe on an AVX2 target (emulated)
EMULATED_AVX512 = "avx512-simde"
# the flavour that runs the AVX2 kernels' byte dot products through the 256-bit vpdpbusd (emulated)
EMULATED_VNNI256 = "vnni256-simde"
EMULATED = (EMULATED_AVX512, EMULATED_VNNI256)
SIMDE_HEADERS = {EMULATED_AVX512: "simde/x86/avx512.h", EMULATED_VNNI256: "simde/x86/avx512/dpbusd.h"}


def flavour_flags(name: str) -> tuple[str, ...]:
    """The compiler flags of a build flavour (see the module doc)."""
    if name == "native":
        return native_flags()
    if name == "portable":
        return portable_flags()
    if name == EMULATED_AVX512:                 # -Wno-psabi: 512-bit values passed without AVX-512
        return BASE_FLAGS + ("-march=x86-64-v3", "-DLLAMANB_AVX512_SIMDE", "-Wno-psabi")
    if name == EMULATED_VNNI256:
        return BASE_FLAGS + ("-march=x86-64-v3", "-DLLAMANB_VNNI256_SIMDE")
    return BASE_FLAGS + (f"-march={name}",)


def cache_dir() -> Path:
    from llamanb.platform.paths import cache_root

    return cache_root() / "cpu"


# bit i of llamanb_cpu_isa(): the compiler defined this macro for the build (kernels/cpu/vec.h)
ISA_MACROS = ("SSE2", "AVX", "AVX2", "FMA", "F16C", "AVX512F", "AVX512BW", "AVX512BF16")


class Dims(ctypes.Structure):
    """kernels/cpu/forward.cc's Dims: the model's sizes and the step's numerics."""
    _fields_ = [(n, ctypes.c_int32) for n in ("L", "H", "n_heads", "n_kv", "d", "F", "rnd")] + \
        [("eps", ctypes.c_float), ("scale", ctypes.c_float), ("fmt", ctypes.c_void_p)]


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


# rows of a weight matrix packed at a time (rounded down to whole panels): 1 MB-9 MB of float32
# for SmolLM2's widths -- small beside the matrices, large beside a call's cost
PACK_ROWS = 4096


def release_heap() -> None:
    """Hand the C heap's free pages back to the OS (glibc's malloc_trim; elsewhere nothing):
    packing frees large temporaries that glibc would otherwise keep in this process (and the
    benchmark's probe array, bench.machine.release_memory)."""
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None).malloc_trim(0)
        except (OSError, AttributeError):                 # not glibc (musl has no malloc_trim)
            pass


HUGE_PAGE = 2 << 20              # x86-64's transparent huge page


class Arena:
    """One anonymous memory mapping that every packed matrix of a model is carved from, advised
    to the kernel as transparent huge pages (madvise MADV_HUGEPAGE, Linux): a decode step streams
    every weight once, and with 4 KiB pages that is a TLB miss every 4 KiB -- 131,000 a float32
    token of SmolLM2. Measured on the 2-core EPYC (Zen 3), the same 121 products over 2 MiB pages:
    float32 decode 1.10x, bfloat16 1.16x, Q4_1 1.14x (paired rounds). One mapping, not one per
    matrix: a huge page is resident whole once touched, so per-matrix mappings would each waste
    up to 2 MiB at their end; the arena wastes at most one page in all. Elsewhere (or where the
    kernel refuses the advice) it is ordinary memory, and the kernels are the same."""

    def __init__(self, nbytes: int):
        import mmap
        import sys

        self.nbytes, self.used, self.huge = int(nbytes), 0, False
        size = -(-max(self.nbytes, 1) // HUGE_PAGE) * HUGE_PAGE + HUGE_PAGE   # room to align
        # private: a shared anonymous mapping (mmap's default) is shmem, whose huge pages are
        # another switch, usually off
        flags = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
        self._map = mmap.mmap(-1, size, flags=flags) if flags else mmap.mmap(-1, size)
        raw = np.frombuffer(self._map, np.uint8)
        off = -raw.ctypes.data % HUGE_PAGE
        if sys.platform.startswith("linux") and hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                self._map.madvise(mmap.MADV_HUGEPAGE)
                self.huge = True
            except OSError:                                     # THP off in this kernel: fine
                pass
        self._buf = raw[off:off + self.nbytes]

    def take(self, shape: tuple, dtype) -> np.ndarray:
        """An uninitialised array carved from the arena, its start 64-byte aligned."""
        dtype = np.dtype(dtype)
        n = int(np.prod(shape)) * dtype.itemsize
        start = -(-self.used // 64) * 64
        if start + n > self.nbytes:
            raise ValueError(f"arena of {self.nbytes} bytes has no room for {n} more")
        self.used = start + n
        return self._buf[start:start + n].view(dtype).reshape(shape)

    @staticmethod
    def room(shapes: list[tuple[tuple, object]]) -> int:
        """The bytes an arena needs for these (shape, dtype) arrays, each 64-byte aligned."""
        return sum(-(-int(np.prod(s)) * np.dtype(d).itemsize // 64) * 64 for s, d in shapes)


# a panel format's code in kernels/cpu (forward.cc's fmt, llamanb_cpu_unpack_quant)
# ("<fmt>_q8": the same panels, multiplied with 8-bit activations)
FORMATS = {"f32": 0, "bf16": 1, "q4_1": 2, "q8_0": 3, "q4_1_q8": 4, "q8_0_q8": 5, "q4_0": 6,
           "q4_0_q8": 7, "q4_k": 8, "q4_k_q8": 9, "q6_k": 10, "q6_k_q8": 11, "q5_0": 12,
           "q5_0_q8": 13}
# the byte widths of the fields before a block's quants: 4-bit formats (16 bytes of nibbles;
# Q5_0's second field is its fifth bits; Q4_K once regrouped by q4_k_blocks: float32 D and M per
# sub-block of 32), and 8-bit ones (32 int8; Q6_K once regrouped by q6_k_blocks: float32 D per
# half block of 16)
NIBBLE_HEADS = {"Q4_1": (2, 2), "Q4_0": (2,), "Q5_0": (2, 4), "Q4_K": (4, 4)}
BYTE_HEADS = {"Q8_0": (2,), "Q6_K": (4, 4)}
# panel formats whose products can take 8-bit activations (quant.h's IDot): all of them
ACT8_FORMATS = tuple(f for f, _, _ in QUANT_FORMATS.values())
# GGUF formats whose blocks re-encode losslessly into another's, for a fused matrix whose parts
# differ (q|k|v of Q5_0 and Q8_0 parts, as llama.cpp writes SmolLM2's Q4_K_M): a Q5_0 or Q4_0
# block is a Q8_0 block with the same float16 d and the quant q - 16 or q - 8 as int8,
# w = d (q - 16) = d q8 to the bit (recode)
RECODE = {"Q5_0": "Q8_0", "Q4_0": "Q8_0"}


def panel_format(kinds) -> str | None:
    """The QUANT_FORMATS name one matrix runs in whose parts (q|k|v, gate|up) are stored in the
    GGUF types `kinds`: their own when they share one that has panels, else one every part is or
    re-encodes into (RECODE); None when there is none (the matrix runs on float32 panels)."""
    kinds = set(kinds)
    if len(kinds) == 1 and next(iter(kinds)) in QUANT_FORMATS:
        return next(iter(kinds))
    for t in QUANT_FORMATS:
        if all(k == t or RECODE.get(k) == t for k in kinds):
            return t
    return None


def recode(raw: np.ndarray, src: str, dst: str) -> np.ndarray:
    """GGUF rows of `src` blocks -> the same weights as rows of `dst` blocks (RECODE), exactly."""
    if src == dst:
        return raw
    if RECODE.get(src) != dst:
        raise LlamanbError(f"no lossless re-encoding of {src} blocks as {dst}")
    N = raw.shape[0]
    b = np.ascontiguousarray(raw, dtype=np.uint8).reshape(N, -1, {"Q4_0": 18, "Q5_0": 22}[src])
    qs = b[..., -16:]                        # low nibbles: weights 0..15, high: 16..31
    q = np.concatenate([qs & 15, qs >> 4], axis=-1).astype(np.int16)         # [N, nb, 32]
    if src == "Q5_0":                        # bit j of the little-endian uint32: weight j's 5th
        hb = b[..., 2:6].copy().view("<u4") >> np.arange(32, dtype=np.uint32)
        q = q + ((hb & 1).astype(np.int16) << 4) - 16
    else:
        q = q - 8
    out = np.concatenate([b[..., :2], q.astype(np.int8).view(np.uint8)], axis=-1)
    return out.reshape(N, -1)


def q4_k_blocks(raw: np.ndarray) -> np.ndarray:
    """GGUF Q4_K rows (uint8 [N, K/256 * 144]) -> per sub-block of 32 weights a 24-byte block laid
    out as Q4_1's with float32 fields: D = d sc, M = -dmin m, then 16 bytes whose low nibbles are
    weights 0..15 and high nibbles 16..31 (w = D q + M, gguf's (d sc) q - dmin m to the bit).

    A Q4_K super-block of 256 weights: float16 d, float16 dmin, 12 bytes of 6-bit scales sc and
    minimums m for its 8 sub-blocks, 128 bytes of quants. In the 12 bytes, sub-blocks 0-3 keep sc
    in the low 6 bits of bytes 0-3 and m in those of bytes 4-7; sub-blocks 4-7 take their low 4
    bits from the nibbles of bytes 8-11 (sc low, m high) and their top 2 bits from the top 2 bits
    of bytes 0-3 (sc) and 4-7 (m). The quants come 32 bytes per pair of sub-blocks: sub-block 2 c
    in the low nibbles of bytes 32 c .. 32 c + 31, sub-block 2 c + 1 in their high nibbles."""
    N = raw.shape[0]
    sb = np.ascontiguousarray(raw, dtype=np.uint8).reshape(N, -1, 144)    # [N, S, 144]
    S = sb.shape[1]
    half = lambda a: a.copy().view(np.float16).astype(np.float32)        # noqa: E731
    d, dmin = half(sb[..., 0:2]), half(sb[..., 2:4])                    # [N, S, 1]
    b = sb[..., 4:16]
    lo, hi, mix = b[..., 0:4], b[..., 4:8], b[..., 8:12]
    sc = np.concatenate([lo & 63, (mix & 15) | ((lo >> 6) << 4)], axis=-1)        # [N, S, 8]
    m = np.concatenate([hi & 63, (mix >> 4) | ((hi >> 6) << 4)], axis=-1)
    D = d * sc.astype(np.float32)                                       # exact (17 bits)
    M = -(dmin * m.astype(np.float32))
    qs = sb[..., 16:].reshape(N, S, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(1, 1, 1, 2, 1)
    q = (qs & 15).reshape(N, S * 8, 32)                                 # sub-block j, weight i
    f32 = lambda a: a.reshape(N, S * 8, 1).view(np.uint8)              # noqa: E731
    out = np.concatenate([f32(D), f32(M), q[..., :16] | (q[..., 16:] << 4)], axis=-1)
    return out.reshape(N, -1)


def q6_k_blocks(raw: np.ndarray) -> np.ndarray:
    """GGUF Q6_K rows (uint8 [N, K/256 * 210]) -> per block of 32 weights a 40-byte block: float32
    D0 and D1, the scales of its two halves of 16 (D = d sc), then 32 int8 quants q - 32 in
    weight order (w = D (q - 32), gguf's (d sc) (q - 32) to the bit).

    A Q6_K super-block of 256 weights: 128 bytes of low 4 bits, 64 bytes of high 2 bits, 16 int8
    scales (one per 16 weights), a float16 d. Each half of 128 weights takes 64 low bytes and 32
    high bytes: weight 64 s + i of the half (s = 0, 1; i < 64) has its low 4 bits in nibble s of
    low byte i, and weight 32 t + i (t < 4, i < 32) its high 2 bits at bits 2 t of high byte i."""
    N = raw.shape[0]
    sb = np.ascontiguousarray(raw, dtype=np.uint8).reshape(N, -1, 210)    # [N, S, 210]
    S = sb.shape[1]
    ql = sb[..., :128].reshape(N, S, 2, 1, 64) >> np.array([0, 4], np.uint8).reshape(2, 1)
    qh = sb[..., 128:192].reshape(N, S, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(4, 1)
    q = ((ql & 15).reshape(N, S, 256) | ((qh & 3).reshape(N, S, 256) << 4)).astype(np.int16) - 32
    sc = sb[..., 192:208].copy().view(np.int8).astype(np.float32)           # [N, S, 16]
    d = sb[..., 208:210].copy().view(np.float16).astype(np.float32)         # [N, S, 1]
    D = (d * sc).reshape(N, S * 8, 2)                                       # exact (18 bits)
    out = np.concatenate([D[..., 0:1].view(np.uint8), D[..., 1:2].view(np.uint8),
                          q.astype(np.int8).reshape(N, S * 8, 32).view(np.uint8)], axis=-1)
    return out.reshape(N, -1)


def fifth_bits(qh: np.ndarray, VW: int) -> np.ndarray:
    """Q5_0's fifth bits of a panel's blocks (uint8 [P, nb, NP, 4]: each column's little-endian
    uint32, bit i for weight i) -> the panel block's two words per lane (uint8 [P, nb, 8 VW]):
    word w of lane j holds, at bit 8 t + 2 g + c, the bit of column c VW + j at k = 4 (4 w + g) + t
    (kernels/cpu/quant.h's Quant<q5_0_t>)."""
    P, nb = qh.shape[:2]
    h = np.ascontiguousarray(qh).view("<u4")[..., 0]                      # [P, nb, NP]
    bits = (h[..., None] >> np.arange(32, dtype=np.uint32)) & 1            # [P, nb, NP, 32]
    bits = bits.reshape(P, nb, 2, VW, 2, 4, 4)                           # [.., c, j, w, g, t]
    c, g, t = np.ix_(range(2), range(4), range(4))
    shift = (8 * t + 2 * g + c).astype(np.uint32).reshape(2, 1, 1, 4, 4)
    words = np.bitwise_or.reduce(bits << shift, axis=(2, 5, 6))           # [P, nb, j, w]
    return np.ascontiguousarray(words.transpose(0, 1, 3, 2).astype("<u4")).view(np.uint8) \
        .reshape(P, nb, 8 * VW)


def pack_quant(raw: np.ndarray, qtype: str, np_width: int) -> np.ndarray:
    """GGUF rows of blocks -> the kernels' quantised panels (kernels/cpu/quant.h).

    raw: uint8 [N, K/32 * bytes per block], row n = output column n (HF order). Returns uint8
    [ceil(N / NP), K/32, block bytes]: per panel and block of 32 k, the NP columns' float16
    scales (Q4_1: then their minimums; Q4_K: float32 D, then M, see q4_k_blocks; Q6_K: float32
    D0, then D1, see q6_k_blocks; Q5_0: then their fifth bits, see fifth_bits), then their
    quants in 8 groups of 4 k, each group column j's
    4 bytes (k = 4 g + t) at bytes 4 j .. 4 j + 3 (4-bit formats: columns j and j + NP/2 share a
    byte, low and high nibble; 8-bit formats: columns NP/2 .. NP-1 follow as a second half).
    Columns past N are zero blocks (weight 0)."""
    _, gb, _ = QUANT_FORMATS[qtype]
    regroup = {"Q4_K": q4_k_blocks, "Q6_K": q6_k_blocks}.get(qtype)
    if regroup is not None:                   # super-blocks of 256 -> panel-ready blocks of 32
        raw, gb = regroup(raw), QUANT_FORMATS[qtype][2]
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    N = raw.shape[0]
    nb = raw.shape[1] // gb
    NP, VW = np_width, np_width // 2
    P = -(-N // NP)
    blocks = np.zeros((P * NP, nb, gb), np.uint8)
    blocks[:N] = raw.reshape(N, nb, gb)
    blocks = blocks.reshape(P, NP, nb, gb).transpose(0, 2, 1, 3)          # [P, nb, NP, gb]

    def cols(a):                                    # [P, nb, NP, c] -> [P, nb, NP * c] bytes
        return np.ascontiguousarray(a).reshape(P, nb, -1)

    if qtype in NIBBLE_HEADS:
        at = np.cumsum((0,) + NIBBLE_HEADS[qtype])                       # the scale fields' bytes
        qs = blocks[..., at[-1]:]                                        # [P, nb, NP, 16]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)                # weight kk of the block
        q = q.transpose(0, 1, 3, 2).reshape(P, nb, 8, 4, NP)            # [P, nb, g, t, NP]
        packed = q[..., :VW] | (q[..., VW:] << 4)                        # [P, nb, g, t, VW]
        parts = [cols(blocks[..., a:b]) for a, b in zip(at, at[1:])] + \
            [cols(packed.transpose(0, 1, 2, 4, 3))]                      # [P, nb, g, VW, t]
        if qtype == "Q5_0":
            parts[1] = fifth_bits(blocks[..., at[1]:at[2]], VW)
    else:
        at = np.cumsum((0,) + BYTE_HEADS[qtype])
        q = blocks[..., at[-1]:].transpose(0, 1, 3, 2)                   # [P, nb, 32, NP] int8
        q = q.reshape(P, nb, 8, 4, 2, VW).transpose(0, 1, 2, 4, 5, 3)   # [P, nb, g, h, VW, t]
        parts = [cols(blocks[..., a:b]) for a, b in zip(at, at[1:])] + [cols(q)]
    return np.concatenate(parts, axis=-1)


class Packed:
    """A weight W [n, k] packed for the matmul kernel: `data` [ceil(n / NP), k, NP] float32 or
    uint16 (bfloat16 bits), or quantised panels [ceil(n / NP), k / 32, block bytes] (fmt "q4_1",
    "q4_0", "q5_0", "q4_k", "q6_k", "q8_0": see pack_quant)."""

    def __init__(self, n: int, k: int, data: np.ndarray, fmt: str | None = None):
        self.n, self.k, self.data = n, k, data
        self.fmt = fmt or ("bf16" if data.dtype == np.uint16 else "f32")
        self.bf16 = self.fmt == "bf16"

    @property
    def nbytes(self) -> int:
        return self.data.nbytes

    @property
    def shape(self) -> tuple[int, int]:
        return self.n, self.k


class Kernels:
    """The loaded library with typed entry points; arrays must be C-contiguous float32 (uint16
    for bf16 weights) unless a stride is passed."""

    def __init__(self, lib: ctypes.CDLL, built: cxx_build.HostBuild, flavour: str):
        self.lib, self.built, self.flavour = lib, built, flavour
        self.native = flavour == "native"
        P, I, L, F = ctypes.c_void_p, ctypes.c_int, ctypes.c_long, ctypes.c_float
        V, D = None, ctypes.c_double
        # each entry point (kernels/cpu/*.cc): what it returns (V: void), and its arguments
        sig = {"llamanb_cpu_matmul_f32": (V, (P, I, I, P, I, P, I, I)),
               "llamanb_cpu_pack_f32": (V, (P, I, I, P)),
               "llamanb_cpu_pack_bf16": (V, (P, I, I, P)),
               "llamanb_cpu_forward": (V, (P, P, P, I, P, P, P, I, P)),
               "llamanb_cpu_panel_width": (I, ()),
               "llamanb_cpu_bf16_unpack_order": (I, ()),
               "llamanb_cpu_matmul_bf16": (V, (P, I, I, P, I, P, I, I)),
               **{f"llamanb_cpu_matmul_{f}{act}": (V, (P, I, I, P, I, P, I, I))
                  for f in ACT8_FORMATS for act in ("", "_q8")},
               "llamanb_cpu_quantize_q8": (V, (P, I, I, P, P, P)),
               "llamanb_cpu_int_dot_bytes": (I, ()),
               "llamanb_cpu_dpbusd_bits": (I, ()),
               "llamanb_cpu_dot4": (V, (P, P, I, P)),
               "llamanb_cpu_q4_1_block_isum": (V, (P, P, P)),          # quant_probe.cc
               "llamanb_cpu_dot_u8s8": (I, (P, P, P)),
               "llamanb_cpu_unpack_quant": (V, (I, P, I, I, P)),
               "llamanb_cpu_rmsnorm": (V, (P, P, P, I, I, F, I)),
               "llamanb_cpu_rope": (V, (P, I, L, I, I, P, P, I)),
               "llamanb_cpu_silu_mul": (V, (P, P, I, I, I)),
               "llamanb_cpu_attention": (V, (P, L, I, I, I, I, I, P, P, L, P, F, I)),
               "llamanb_cpu_read_sum": (D, (P, L)),
               "llamanb_cpu_read_panels": (ctypes.c_uint32, (P, P, P, I)),
               "llamanb_cpu_exp": (V, (P, P, L)),
               "llamanb_cpu_vector_width": (I, ()),
               "llamanb_cpu_isa": (I, ()),
               "llamanb_cpu_emulated": (I, ()),
               "llamanb_cpu_bf16_dot": (I, ()),
               "llamanb_cpu_threads": (I, ())}
        for name, (res, args) in sig.items():
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = list(args), res
        self.vector_width = lib.llamanb_cpu_vector_width()
        self.panel_width = lib.llamanb_cpu_panel_width()
        # how this build lays out packed weights (a cached copy must have been packed alike)
        self.layout = f"np{self.panel_width}" + ("-bf16u" if lib.llamanb_cpu_bf16_unpack_order() else "")
        self.threads = lib.llamanb_cpu_threads()
        bits = lib.llamanb_cpu_isa()
        # the instruction-set macros the compiler defined for this build (kernels/cpu/vec.h)
        self.isa = tuple(n for i, n in enumerate(ISA_MACROS) if bits >> i & 1)
        # whether the 8-bit-activation products use byte dot products (vpmaddubsw)
        self.int_dot_bytes = bool(lib.llamanb_cpu_int_dot_bytes())
        # the width of the vpdpbusd they use instead of vpmaddubsw + vpmaddwd (0: none; in the
        # *-simde flavours emulated)
        self.dpbusd_bits = lib.llamanb_cpu_dpbusd_bits()
        # the instruction that takes a q8 product's byte dot products
        self.int_dot = ("vpdpbusd" if self.dpbusd_bits else "vpmaddubsw" if self.int_dot_bytes
                        else "int32 lanes")
        # whether the AVX-512 paths run emulated, through SIMDe (the avx512-simde flavour), or
        # the 256-bit vpdpbusd does (vnni256-simde)
        self.emulated = bool(lib.llamanb_cpu_emulated())
        # whether bfloat16 products of bfloat16 activations multiply pairs by vdpbf16ps (or, in
        # that flavour, its emulation) rather than widening: the same bits (kernels/cpu/vec.h)
        self.bf16_dot = bool(lib.llamanb_cpu_bf16_dot())

    def packed_layout(self, n: int, k: int, fmt: str) -> tuple[tuple, object]:
        """(shape, dtype) of W [n, k] packed in panel format fmt ("f32", "bf16", or a
        QUANT_FORMATS name): what pack / pack_quant return, for carving it from an Arena beforehand."""
        P = -(-n // self.panel_width)
        if fmt in QUANT_FORMATS:
            return (P, k // 32, QUANT_FORMATS[fmt][2] * self.panel_width), np.uint8
        return (P, k, self.panel_width), np.uint16 if fmt == "bf16" else np.float32

    def pack(self, w: np.ndarray, bf16: bool = False, done=None, out=None) -> Packed:
        """W [N, K] -> panels [ceil(N / NP), K, NP] (kernels/cpu/matmul.cc), float32 or bfloat16
        bits (rounded to nearest even); NP = this build's panel width.

        Packed a slice of PACK_ROWS rows (whole panels) at a time; `done(rows)`, if given, is
        called with each slice of w once its panels are written -- the backend hands a
        memory-mapped slice's pages back there, so packing a large matrix never holds all of
        it and all of its panels at once. `out`: the panels' array, if carved beforehand (an
        Arena; packed_layout gives its shape)."""
        N, K = w.shape
        NP = self.panel_width
        shape, dtype = self.packed_layout(N, K, "bf16" if bf16 else "f32")
        data = np.empty(shape, dtype) if out is None else out
        assert data.shape == shape and data.dtype == dtype and data.flags.c_contiguous
        fn = self.lib.llamanb_cpu_pack_bf16 if bf16 else self.lib.llamanb_cpu_pack_f32
        step = max(PACK_ROWS // NP, 1) * NP
        for r0 in range(0, N, step):
            rows = np.ascontiguousarray(w[r0:r0 + step], dtype=np.float32)
            fn(rows.ctypes.data, rows.shape[0], K, data[r0 // NP:].ctypes.data)
            if done is not None:
                done(w[r0:r0 + step])
        return Packed(N, K, data)

    # y [M, N] (+)= x [M, K] @ W[N, K]^T
    # act8: quantised panels only -- each activation row quantised to 8-bit blocks of 32 and the
    # block dot products taken in integers (kernels/cpu/quant.h)
    def matmul(self, x: np.ndarray, w: Packed, y: np.ndarray, accumulate: bool = False,
               rnd: bool = False, act8: bool = False) -> np.ndarray:
        M, K = x.shape
        N = w.n
        assert w.k == K and y.shape == (M, N) and x.flags.c_contiguous and y.flags.c_contiguous
        assert not act8 or w.fmt in ACT8_FORMATS
        fn = getattr(self.lib, f"llamanb_cpu_matmul_{w.fmt}" + ("_q8" if act8 else ""))
        fn(x.ctypes.data, M, K, w.data.ctypes.data, N, y.ctypes.data, int(accumulate), int(rnd))
        return y

    def pack_quant(self, raw: np.ndarray, qtype: str, k: int, done=None, out=None) -> Packed:
        """GGUF blocks (uint8 [N, K/32 * block bytes]) -> quantised panels of this build's width,
        PACK_ROWS rows (whole panels) at a time, so pack_quant's temporaries stay the size of a
        slice; `done(rows)` and `out` as in `pack`."""
        NP = self.panel_width
        N = raw.shape[0]
        step = max(PACK_ROWS // NP, 1) * NP
        shape, dtype = self.packed_layout(N, k, qtype)
        data = np.empty(shape, dtype) if out is None else out
        assert data.shape == shape and data.dtype == dtype and data.flags.c_contiguous
        for r0 in range(0, N, step):
            part = pack_quant(raw[r0:r0 + step], qtype, NP)            # [panels, K/32, bytes]
            data[r0 // NP:r0 // NP + part.shape[0]] = part
            if done is not None:
                done(raw[r0:r0 + step])
        return Packed(N, k, data, QUANT_FORMATS[qtype][0])

    def unpack(self, w: Packed) -> np.ndarray:
        """Quantised panels -> W [N, K] float32, each weight decoded as the matmul decodes it."""
        out = np.empty((w.n, w.k), np.float32)
        self.lib.llamanb_cpu_unpack_quant(FORMATS[w.fmt], w.data.ctypes.data, w.n, w.k,
                                          out.ctypes.data)
        return out

    def quantize_q8(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Rows x [M, K] (K a multiple of 32) -> the 8-bit blocks the act8 products use: q int8
        [M, K], d and s float32 [M, K / 32] (scale max|x| / 127 and d * sum q, per block)."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        M, K = x.shape
        assert K % 32 == 0
        q = np.empty((M, K), np.int8)
        d, s = np.empty((M, K // 32), np.float32), np.empty((M, K // 32), np.float32)
        self.lib.llamanb_cpu_quantize_q8(x.ctypes.data, M, K, q.ctypes.data, d.ctypes.data,
                                         s.ctypes.data)
        return q, d, s

    def dot4(self, u: np.ndarray, s: np.ndarray) -> np.ndarray:
        """out[j] = sum_t u[4j + t] s[4j + t] (t < 4) for uint8 u and int8 s of one length (a
        multiple of 64), through the step the q8 products are made of: vpdpbusd, or vpmaddubsw
        + vpmaddwd, whose pair sums saturate at int16 (self.int_dot; kernels/cpu/quant.h)."""
        u = np.ascontiguousarray(u, dtype=np.uint8)
        s = np.ascontiguousarray(s, dtype=np.int8)
        assert u.shape == s.shape and u.ndim == 1 and u.size % 64 == 0
        out = np.empty(u.size // 4, np.int32)
        self.lib.llamanb_cpu_dot4(u.ctypes.data, s.ctypes.data, u.size, out.ctypes.data)
        return out

    def exp(self, x: np.ndarray) -> np.ndarray:
        """e^x elementwise by the kernels' own exp (vec.h's exp_vf: softmax and SiLU use it)."""
        x = np.ascontiguousarray(x, dtype=np.float32)
        y = np.empty_like(x)
        self.lib.llamanb_cpu_exp(x.ctypes.data, y.ctypes.data, x.size)
        return y

    def read_sum(self, a: np.ndarray) -> float:
        """The float64 sum of a float32 array, read by every pool thread (a bandwidth probe)."""
        a = np.ascontiguousarray(a, dtype=np.float32)
        return self.lib.llamanb_cpu_read_sum(a.ctypes.data, a.size)

    def panel_reader(self, mats: list[Packed]):
        """A function of no arguments that reads every byte of `mats`' panels, one matrix after
        another, each shared among the threads as a decode product shares it, and multiplies
        nothing (matmul.cc's read_like_decode): it returns the wrapping sum of their 32-bit words,
        so no read can be skipped. The bench times this bare read beside the decode (on the Zen 3
        the one-row product itself reads about 5 % faster: docs/performance.md). The arrays are
        set up here, once."""
        for m in mats:
            if not m.data.flags.c_contiguous or m.data.nbytes % (4 * m.data.shape[0]):
                raise ValueError(f"{m.fmt} panels of shape {m.data.shape}: not contiguous, or a "
                                 "panel that is not a whole number of 32-bit words")
        n = len(mats)
        keep = [m.data for m in mats]                       # the pointers below stay valid
        ptrs = (ctypes.c_void_p * n)(*[a.ctypes.data for a in keep])
        sizes = (ctypes.c_long * n)(*[a.nbytes // a.shape[0] for a in keep])
        panels = (ctypes.c_int * n)(*[a.shape[0] for a in keep])

        def read(_keep=keep) -> int:
            return self.lib.llamanb_cpu_read_panels(ptrs, sizes, panels, n)
        return read

    def rmsnorm(self, x: np.ndarray, w: np.ndarray, eps: float, rnd: bool = False) -> np.ndarray:
        out = np.empty_like(x)
        self.lib.llamanb_cpu_rmsnorm(x.ctypes.data, w.ctypes.data, out.ctypes.data, x.shape[0],
                                     x.shape[1], eps, int(rnd))
        return out

    # ---- probes of the 8-bit path on one block (kernels/cpu/quant_probe.cc; chapter 11b) ----
    def q4_1_block_isum(self, block: np.ndarray, qa: np.ndarray) -> np.ndarray:
        """One Q4_1 panel block (uint8, pack_quant's [p, b]: NP columns x 32 k) times one block of
        32 int8 activations -> the NP columns' int32 integer sums, by quant.h's IDot<q4_1_t>."""
        block = np.ascontiguousarray(block, np.uint8)
        qa = np.ascontiguousarray(qa, np.int8)
        assert block.shape == (QUANT_FORMATS["Q4_1"][2] * self.panel_width,) and qa.shape == (32,)
        out = np.empty(self.panel_width, np.int32)
        self.lib.llamanb_cpu_q4_1_block_isum(block.ctypes.data, qa.ctypes.data, out.ctypes.data)
        return out

    def dot_u8s8(self, u: np.ndarray, s: np.ndarray) -> np.ndarray | None:
        """quant.h's dot_u8s8 (vpmaddubsw) on one vector: u uint8 [4 VW] times s int8 [4 VW],
        adjacent products summed and saturated -> int16 [2 VW]; None where the build has no byte
        dot product (int_dot_bytes False)."""
        u, s = np.ascontiguousarray(u, np.uint8), np.ascontiguousarray(s, np.int8)
        assert u.shape == s.shape == (4 * self.vector_width,)
        out = np.empty(2 * self.vector_width, np.int16)
        return out if self.lib.llamanb_cpu_dot_u8s8(u.ctypes.data, s.ctypes.data,
                                                    out.ctypes.data) else None


@lru_cache(maxsize=None)
def _load(kernels_dir: Path, cache: Path, wanted: str) -> Kernels | str:
    # native falls back to portable (a compiler without -march=native); a named flavour does not
    tries = ("native", "portable") if wanted == "native" else (wanted,)
    for name in tries:
        built = cxx_build.build(kernels_dir, cache, flavour_flags(name), "cpu-kernels")
        if built is not None:          # checked against its record before it is loaded
            return Kernels(ctypes.CDLL(str(built.path)), built, name)
    why = cxx_build.reason(kernels_dir, flavour_flags(tries[-1])) or "the build failed"
    if wanted in SIMDE_HEADERS and SIMDE_HEADERS[wanted] in why:
        why = (f"it needs SIMDe's headers ({SIMDE_HEADERS[wanted]}: Debian's libsimde-dev), "
               "which the compiler does not find")
    return why if wanted == "native" else f"{MARCH_VAR}={wanted}: {why}"


def built(kernels_dir: Path = KERNELS_DIR) -> bool:
    """Whether load() finds its library in the cache already (False: it will compile first)."""
    cxx, _ = cxx_build.compiler()
    if cxx is None:
        return False
    try:
        tries = ("native", "portable") if flavour() == "native" else (flavour(),)
    except LlamanbError:
        return False
    keys = (cxx_build.build_key(cxx, Path(kernels_dir), flavour_flags(f))[:24] for f in tries)
    # a library that fails its record's check is built again (cxx_build.build): not "built"
    return any(cxx_build.library_problem(cache_dir() / f"cpu-kernels-{key}.so") is None
               for key in keys)


def load(kernels_dir: Path = KERNELS_DIR, flavour_name: str | None = None) -> Kernels:
    """The kernels of one build flavour (default: $LLAMANB_CPU_MARCH, else native), built at
    first use; a LlamanbError (one line, naming the numpy backend) when they cannot be built."""
    wanted = check_flavour(flavour_name, "march") if flavour_name else flavour()
    threads_from_env()                         # the pool reads it when the library first runs
    cxx, why = cxx_build.compiler()
    if cxx is None:
        raise LlamanbError(f"backend 'cpu' compiles C++ at first use, but {why} "
                           "(set LLAMANB_CXX, or use --backend numpy)")
    lacking = missing_here(wanted)
    if lacking:
        raise LlamanbError(f"backend 'cpu': -march={wanted} uses {', '.join(lacking)}, which this "
                           "CPU does not have (the kernels would stop with SIGILL); use native "
                           "or an older -march")
    with stages() as say:                      # a notebook shows the line while it compiles
        if not built(Path(kernels_dir)):
            say("compiling the cpu backend's C++ kernels for this CPU, once (about 15 s)")
        got = _load(Path(kernels_dir), cache_dir(), wanted)
    if isinstance(got, str):
        raise LlamanbError(f"backend 'cpu': {got} (use --backend numpy)")
    return got
