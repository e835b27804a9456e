"""The cpu backend: the Llama block in the course's own C++ kernels (kernels/cpu), on the host CPU.

    x [R, H] --rmsnorm--> --qkv matmul--> --rope (q, k)--> cache.write --attention per sequence-->
             --wo matmul, += x--> --rmsnorm--> --gate|up matmul--> --silu*mul--> --down, += x-->

Every matrix product is one kernel (kernels/cpu/matmul.cc) over weights packed into k-major panels
of NP = 2 x vector-width output columns (gate and up packed as one [2 D_ff, H] matrix), at load:
from the model cache's one float32 copy (or the GGUF's blocks), a slice of rows at a time, each
mapped slice's pages handed back once packed, into one arena of transparent huge pages
(cpu_kernels.Arena: a step streams every weight, and 4 KiB pages cost a TLB miss each).
`dtype="bf16"` stores them as bfloat16 bits, halving the bytes a decode step reads.
`dtype="q4_1"` (or "q4_0", "q5_0", "q4_k", "q6_k", "q8_0", or "auto": each matrix as the file
stores it) runs a GGUF's own blocks: they are regrouped into panels (cpu_kernels.pack_quant) and
decoded in registers inside the matmul (kernels/cpu/quant.h), never expanded to floats -- a Q4_1
model streams 0.625 bytes a weight instead of 4 (Q5_0 0.6875, as its file; Q4_K 0.75, Q6_K 1.25:
sub-block scales as float32). A fused matrix (q|k|v, gate|up) whose parts differ runs in one
format all re-encode into losslessly: Q5_0 and Q4_0 parts beside Q8_0 ones as Q8_0
(cpu_kernels.recode); one whose parts share no panel format, and any other format, runs on
float32 panels. By default
(activations="int8") each activation row is quantised once per product to 8-bit blocks of 32 and
the blocks' dot products are integer (vpmaddubsw on AVX2);
with activations="float32" each decoded weight is exactly the float32 the cache's dequantised
copy holds, so that engine computes the float32 engine's bits from a sixth of its bytes.
The kernel streams each panel once per step and multiplies every activation row against it, so
a step of 8 decoding sequences reads the weights once, as one does.

Each output element is one FMA chain over k = 0 .. K-1 in one vector lane, the same whatever the
other rows of the step are: a row's result does not depend on its neighbours, so the engine need
not pad (row_multiple = row_align = 1). With dtype="bf16" every op's output is rounded to
bfloat16, as the numpy engine's bf16 mode does.

Resident memory is the panels and little else (tests/cpu/test_cpu_memory.py): the float32 cache
the panels are packed from stays mapped but gives its pages back as each slice is packed; the
norms are copied out of it; the embedding's rows are read from its file by pread (FileRows),
never through the mapping, whose read-around would make megabytes of the table resident.

`layers` runs every block of a step in one call (kernels/cpu/forward.cc: the same kernels in the
same order as `block`), writing K/V into the store's float32 arrays in place and reading each
sequence's keys block by block through its block table -- the contiguous store is one block per
slot, the paged store its pool. When every block's output is asked for (`collect`), or for any
other store, `block` runs layer by layer from Python and attention reads `cache.keys/values`.
"""
from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np

from llamanb.cpu.dtypes import DTYPES, QUANT_DTYPES
from llamanb.errors import LlamanbError
from llamanb.engine.kv.base import KVStore
from llamanb.engine.kv.contiguous import KVCache
from llamanb.engine.kv.paged import PagedKVCache
from llamanb.model.numerics import to_bf16
from llamanb.model.rope import cos_sin, rope_for
from llamanb.engine.step import Step
from llamanb.model.weights import Weights, layer_names
from llamanb.cpu import kernels as cpu_kernels
from llamanb.engine.backend import Backend


# a GGUF's own blocks, one format for every layer matrix ("q4_1", ...), or "auto": each as stored
# How quantised panels meet the activations: "int8" quantises each activation row to 8-bit
# blocks of 32 and takes integer dot products (the default: about 3x fewer instructions a weight),
# "float32" decodes each weight to float32 (the float32 engine's bits). $LLAMANB_CPU_ACTIVATIONS
# picks it where the backend is made by name (the CLI); the `activations` option overrides it.
ACTIVATIONS = ("int8", "float32")
ACTIVATIONS_VAR = "LLAMANB_CPU_ACTIVATIONS"


def default_activations() -> str:
    import os

    value = os.environ.get(ACTIVATIONS_VAR, "").strip() or "int8"
    if value not in ACTIVATIONS:
        raise LlamanbError(f"{ACTIVATIONS_VAR}={value!r}: use int8 or float32")
    return value


def release_pages(a: np.ndarray) -> None:
    """Hand a file-mapped array's pages back (madvise MADV_DONTNEED, Linux): they stay in the
    page cache and come back on the next touch, but stop counting in this process's resident
    memory. Anything not mapped from a file is left alone (DONTNEED would zero anonymous
    memory)."""
    import mmap
    import sys

    base = a
    while base is not None and not isinstance(base, mmap.mmap):
        base = getattr(base, "base", None)
    if base is None or not sys.platform.startswith("linux") or a.nbytes == 0:
        return
    page = mmap.PAGESIZE
    start = a.__array_interface__["data"][0]
    lo, hi = start // page * page, -(-(start + a.nbytes) // page) * page
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise(ctypes.c_void_p(lo), ctypes.c_size_t(hi - lo), ctypes.c_int(4))   # DONTNEED


class FileRows:
    """Rows of a 2-D array memory-mapped from a file (np.memmap underneath), read with pread
    instead of through the mapping: a page fault on a mapped file maps a whole read-around window
    (hundreds of KiB), so a gather of a prompt's token rows from SmolLM2's 113 MB embedding
    table made 28 MB of it resident (512 tokens, 105 distinct, on the 2-core EPYC); pread copies
    the 2,304 bytes of each row and maps nothing. `of(a)` is None for an array that is not
    file-mapped (or not C-contiguous): gather from it as it is."""

    def __init__(self, a: np.ndarray, path: str, offset: int):
        import os
        import weakref

        self.shape, self.dtype, self.offset = a.shape, a.dtype, offset
        self.row_bytes = a.strides[0]
        self.fd = os.open(path, os.O_RDONLY)
        weakref.finalize(self, os.close, self.fd)

    @classmethod
    def of(cls, a: np.ndarray) -> "FileRows | None":
        base = a
        while base is not None and not (isinstance(base, np.memmap) and base.filename):
            base = base.base
        if base is None or a.ndim != 2 or not a.flags.c_contiguous:
            return None
        at = a.__array_interface__["data"][0] - base.__array_interface__["data"][0] + base.offset
        return cls(a, base.filename, at)

    def __getitem__(self, ids) -> np.ndarray:
        """Rows ids [R] -> [R, cols] (each distinct row read once; a single row without
        np.unique, whose sort and gather cost a decode step about 1 % at q4_1)."""
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if ids.size == 1:                   # a decode step's one row: nothing to share or sort
            return self._read(ids.tolist())
        uniq, where = np.unique(ids, return_inverse=True)
        return self._read(uniq.tolist())[where]

    def _read(self, rows: list[int]) -> np.ndarray:
        import os

        if rows and (min(rows) < 0 or max(rows) >= self.shape[0]):
            raise IndexError(f"row index out of range for {self.shape[0]} rows")
        out = np.empty((len(rows),) + self.shape[1:], self.dtype)
        for i, r in enumerate(rows):
            got = os.preadv(self.fd, [out[i]], self.offset + r * self.row_bytes)
            if got != self.row_bytes:
                raise LlamanbError(f"the model cache's weights file ended early (row {r}); "
                                   "load the model again")
        return out


def matrix_parts(c) -> dict[str, list[str]]:
    """The backend's matrices -> the HF tensors stacked into each, in order: "{layer}.wqkv" (q, k,
    v), ".wo", ".gate_up" (gate, up), ".down", and "lm_head" (the embedding when tied)."""
    parts = {f"{i}.{n}": [names[p] for p in ps] for i in range(c.n_layers)
             for names in [layer_names(i)]
             for n, ps in (("wqkv", ("q", "k", "v")), ("wo", ("o",)),
                           ("gate_up", ("gate", "up")), ("down", ("down",)))}
    parts["lm_head"] = ["model.embed_tokens.weight" if c.tie_embeddings else "lm_head.weight"]
    return parts


def runs_from_blocks(weights: Weights, c) -> bool:
    """Whether `dtype="auto"` runs every matrix of these weights from the GGUF's own blocks (none
    falls back to float32 panels). False for weights with no quantised source."""
    if weights.quantized is None:
        return False
    return all(cpu_kernels.panel_format(weights.quantized(n)[0] for n in hf) is not None
               for hf in matrix_parts(c).values())


def check_dtype(backend: str, dtype: str) -> None:
    """One line for a --dtype that only the cpu backend runs, asked of another backend."""
    if dtype in QUANT_DTYPES and backend != "cpu":
        raise LlamanbError(f"--dtype {dtype} runs on --backend cpu (the numpy engine computes the "
                           "same dequantised weights with --dtype float32)")


class CpuBackend(Backend):
    name = "cpu"

    DTYPES = DTYPES

    def __init__(self, weights: Weights, dtype: str = "float32", activations: str | None = None,
                 march: str | None = None, kernels_dir: str | Path | None = None):
        """march: the kernels' build flavour (cpu_kernels: "native", "portable" or a -march
        name); default $LLAMANB_CPU_MARCH, else native. kernels_dir: the C++ sources to build
        (default kernels/cpu; `bench --kernels` passes a changed copy)."""
        if dtype not in self.DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(self.DTYPES)}, got {dtype!r}")
        activations = activations or default_activations()
        if activations not in ACTIVATIONS:
            raise ValueError(f"activations must be one of {', '.join(ACTIVATIONS)}, got "
                             f"{activations!r}")
        self.k = cpu_kernels.load(Path(kernels_dir) if kernels_dir else cpu_kernels.KERNELS_DIR,
                                  flavour_name=march)   # LlamanbError (one line) without a compiler
        super().__init__(weights)
        c = self.config
        mats = {f"{i}.{n}": m for i, w in enumerate(weights.layers) for n, m in
                (("wqkv", w.wqkv), ("wo", w.wo), ("gate_up", w.w_gate_up), ("down", w.w_down))}
        mats["lm_head"] = weights.lm_head                                # [V, H]
        quant = self._quantised(weights, dtype, c)                       # name -> (qtype, rows)
        if dtype in QUANT_DTYPES:
            dtype = "float32" if not quant else dtype
        self.dtype, self.bf16 = dtype, dtype == "bf16"
        # quantised panels multiplied with 8-bit activations (kernels/cpu/quant.h's IDot)
        self.act8 = bool(quant) and activations == "int8"
        self.activations = "int8" if self.act8 else "float32"
        isa = {"native": "-march=native", "portable": "portable flags",
               cpu_kernels.EMULATED_AVX512: "AVX-512 code EMULATED through SIMDe on AVX2: "
               "AVX-512's results, not its speed",
               cpu_kernels.EMULATED_VNNI256: "vpdpbusd EMULATED through SIMDe on AVX2: its "
               "results, not its speed"}.get(self.k.flavour, f"-march={self.k.flavour}")
        if quant:
            # each matrix as the file stores it, and the panels it runs on where they differ
            named = [("/".join(sorted(set(src))) + ("" if set(src) == {q} else f" as {q}"))
                     for q, _, src in quant.values()]
            what = " + ".join(f"{named.count(k)} {k}" for k in sorted(set(named))) + \
                " matrices as stored in the GGUF" + \
                (f", {len(mats) - len(quant)} float32" if len(quant) < len(mats) else "") + \
                (", 8-bit activations" if self.act8 else ", float32 activations")
        else:
            what = f"{dtype} weights"
            if self.bf16 and self.k.bf16_dot:
                what += ", products by vdpbf16ps" + (" (emulated)" if self.k.emulated else "")
        self.description = (f"compiled C++ kernels on the host CPU ({what}, "
                            f"{self.k.vector_width}-lane vectors, {isa}, {self.k.threads} threads)")
        self._embed_rows = FileRows.of(weights.embed) or weights.embed
        self.freqs = rope_for(c)
        self.scale = float(c.head_dim ** -0.5)
        self._rope_key, self._rope = None, None
        self._reader = None                  # read_weights' reader, made on its first call
        # every matrix's panels carved from one huge-page arena (cpu_kernels.Arena)
        fmt = {n: quant[n][0] if n in quant else "bf16" if self.bf16 else "f32" for n in mats}
        layout = {n: self.k.packed_layout(*mats[n].shape, fmt[n]) for n in mats}
        self.arena = cpu_kernels.Arena(cpu_kernels.Arena.room(list(layout.values())))
        mat = {}
        for n, m in mats.items():
            out = self.arena.take(*layout[n])
            if n not in quant:
                mat[n] = self.k.pack(m, bf16=self.bf16, done=release_pages, out=out)
                continue
            parts = [cpu_kernels.recode(p, src, fmt[n])     # one matrix's blocks at a time,
                     for p, src in zip(quant[n][1], quant[n][2])]   # then let go
            raw = parts[0]
            if len(parts) > 1:
                raw = np.concatenate(parts)
                for part in quant[n][1]:
                    release_pages(part)
            mat[n] = self.k.pack_quant(raw, fmt[n], m.shape[1], done=release_pages, out=out)
            del raw
        cpu_kernels.release_heap()       # the packing's freed temporaries, back to the OS
        def vec(a):                     # norms: copied out of the mapping, its pages handed back
            out = to_bf16(a) if self.bf16 else np.array(a, dtype=np.float32, order="C")
            release_pages(a)
            return out
        self.layer_w = [dict(attn_norm=vec(w.attn_norm), wqkv=mat[f"{i}.wqkv"], wo=mat[f"{i}.wo"],
                             ffn_norm=vec(w.ffn_norm), gate_up=mat[f"{i}.gate_up"],
                             down=mat[f"{i}.down"]) for i, w in enumerate(weights.layers)]
        self.final_norm = vec(weights.final_norm)
        self.lm_head = mat["lm_head"]                                   # [V, H] packed
        self.weight_bytes = sum(a.nbytes for lw in self.layer_w for a in lw.values()) + \
            self.lm_head.nbytes + self.final_norm.nbytes
        # forward.cc's arguments that never change: the sizes, 6 weight pointers per layer and
        # each one's panel format (norm vectors: float32, ignored)
        ptrs = [(a.data if isinstance(a, cpu_kernels.Packed) else a).ctypes.data
                for lw in self.layer_w for a in lw.values()]
        fmts = [cpu_kernels.FORMATS[a.fmt + ("_q8" if self._act8(a) else "")]
                if isinstance(a, cpu_kernels.Packed) else 0
                for lw in self.layer_w for a in lw.values()]
        self._wptrs = (ctypes.c_void_p * len(ptrs))(*ptrs)
        self._fmts = (ctypes.c_int32 * len(fmts))(*fmts)
        self._dims = cpu_kernels.Dims(c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim,
                                      c.ffn, int(self.bf16), c.rms_eps, self.scale,
                                      ctypes.cast(self._fmts, ctypes.c_void_p))

    def _act8(self, w: cpu_kernels.Packed) -> bool:
        """Whether products with w take 8-bit activations (quantised panels, activations=int8)."""
        return self.act8 and w.fmt in cpu_kernels.ACT8_FORMATS

    def _mm(self, x: np.ndarray, w: cpu_kernels.Packed, y: np.ndarray, accumulate: bool = False):
        return self.k.matmul(x, w, y, accumulate=accumulate, rnd=self.bf16, act8=self._act8(w))

    @staticmethod
    def _quantised(weights: Weights, dtype: str, c) -> dict:
        """The matrices to run on the GGUF's own blocks: name -> (panel format, [uint8 rows
        [n, ...] of each part], [each part's GGUF type]), a fused matrix's parts (q|k|v, gate|up)
        in stacking order, in one format (cpu_kernels.panel_format). Empty for float32 and bf16,
        and for "auto" on weights with no quantised source; "q4_1", "q4_k", ... ask that every
        layer matrix be stored in that format (one line if not)."""
        if dtype in ("float32", "bf16"):
            return {}
        if weights.quantized is None:
            if dtype == "auto":
                return {}
            raise LlamanbError(f"--dtype {dtype} runs a GGUF file's own {dtype.upper()} blocks, but "
                               f"{c.name} was not loaded from a GGUF file (use --dtype float32)")
        out, stored = {}, {}
        for name, hf in matrix_parts(c).items():
            got = [weights.quantized(n) for n in hf]
            stored[name] = "/".join(sorted({q for q, _ in got}))
            fmt = cpu_kernels.panel_format(q for q, _ in got)
            if fmt is not None:
                out[name] = (fmt, [r for _, r in got], [q for q, _ in got])  # stacked when packed
        if dtype != "auto":
            want = dtype.upper()
            wrong = {n: q for n, q in stored.items() if n != "lm_head" and q != want}
            if wrong:
                n, q = next(iter(wrong.items()))
                raise LlamanbError(f"--dtype {dtype} runs a GGUF file's own {want} blocks, but "
                                   f"{len(wrong)} of its layer matrices are not {want} (layer "
                                   f"matrix {n} is {q}); use --dtype auto to run each as stored")
        return out

    def embed(self, ids: np.ndarray) -> np.ndarray:
        """ids [R] -> x [R, H] float32 (bf16: rounded to bfloat16): the embedding's rows, read from
        the model cache's file by pread where it is mapped from one (FileRows), so that the table
        the decode never streams stays out of this process's resident memory."""
        x = np.asarray(self._embed_rows[ids], dtype=np.float32)
        return to_bf16(x) if self.bf16 else x

    def rope_tables(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """cos, sin [R, d/2] for the step's positions, made once per step (not per layer)."""
        key = positions.tobytes()
        if self._rope_key != key:
            cos, sin = cos_sin(positions, self.freqs)
            self._rope = np.ascontiguousarray(cos), np.ascontiguousarray(sin)
            self._rope_key = key
        return self._rope

    def layers(self, x: np.ndarray, step: Step, cache: KVStore, collect: list | None = None) -> np.ndarray:
        """All L blocks in one call to kernels/cpu/forward.cc, which writes K/V straight into the
        store's float32 arrays (contiguous or paged: both are pools of blocks to it); block by
        block from Python when `collect` asks for every block's output or the store is another."""
        pools = self._pools(cache)
        if collect is not None or pools is None:
            return super().layers(x, step, cache, collect)
        k_pool, v_pool, block, tables = pools
        x = np.array(x, dtype=np.float32, order="C")                    # [R, H], updated in place
        cos, sin = self.rope_tables(step.positions)                      # [R, d/2]
        keep = [np.asarray(tables(s), dtype=np.int32) for s in step.segments]   # block ids
        segs = (cpu_kernels.Seg * len(step.segments))(
            *[(s.row, s.n, s.start, s.slot, t.ctypes.data) for s, t in zip(step.segments, keep)])
        f = k_pool.itemsize
        desc = cpu_kernels.CacheDesc(k_pool.ctypes.data, v_pool.ctypes.data, k_pool.strides[0] // f,
                                     k_pool.strides[1] // f, k_pool.strides[2] // f, block)
        self.k.lib.llamanb_cpu_forward(ctypes.byref(self._dims), self._wptrs, x.ctypes.data,
                                       x.shape[0], cos.ctypes.data, sin.ctypes.data, segs,
                                       len(step.segments), ctypes.byref(desc))
        return x

    @staticmethod
    def _pools(cache: KVStore):
        """(k pool, v pool, positions per block, slot's segment -> its block ids) for a float32
        store forward.cc can write in place [n_blocks, L, N_kv, block, d]; None otherwise."""
        if isinstance(cache, KVCache):                 # one block of the whole capacity per slot
            k, v = cache.k_all, cache.v_all

            def tables(seg):
                cache.writing(seg.slot, seg.start, seg.n)              # room, high-water mark
                return [seg.slot]
            block = cache.capacity
        elif isinstance(cache, PagedKVCache):          # the engine reserved the step's blocks
            k, v, block = cache.k_pool, cache.v_pool, cache.block

            def tables(seg):
                return cache.tables[seg.slot][: -(-seg.end // block)]
        else:
            return None
        if k.dtype != np.float32 or not (k.flags.c_contiguous and v.flags.c_contiguous):
            return None
        return k, v, block, tables

    def block(self, layer: int, x: np.ndarray, step: Step, cache: KVStore) -> np.ndarray:
        c, w, k, rnd = self.config, self.layer_w[layer], self.k, self.bf16
        R, Nh, Nkv, d = x.shape[0], c.n_heads, c.n_kv_heads, c.head_dim
        x = np.array(x, dtype=np.float32, order="C")                    # [R, H], updated in place

        # --- attention sub-block -------------------------------------------------------------
        h = k.rmsnorm(x, w["attn_norm"], c.rms_eps, rnd)                  # [R, H]
        Q = (Nh + 2 * Nkv) * d
        qkv = self._mm(h, w["wqkv"], np.empty((R, Q), np.float32))      # [R, (Nh+2Nkv) d]
        cos, sin = self.rope_tables(step.positions)                      # [R, d/2]
        k.lib.llamanb_cpu_rope(qkv.ctypes.data, R, Q, Nh + Nkv, d, cos.ctypes.data,
                               sin.ctypes.data, int(rnd))                # q and k, in place
        kk = qkv[:, Nh * d:(Nh + Nkv) * d].reshape(R, Nkv, d)           # [R, Nkv, d]
        vv = qkv[:, (Nh + Nkv) * d:].reshape(R, Nkv, d)                 # [R, Nkv, d]
        attn = np.zeros((R, Nh * d), dtype=np.float32)                  # padding rows stay 0
        for seg in step.segments:                                       # each sequence its own keys
            r = seg.rows
            cache.write(layer, seg.slot, seg.start, kk[r], vv[r])
            keys = self._kv_view(cache.keys(layer, seg.slot, seg.end))   # [Nkv, T, d]
            vals = self._kv_view(cache.values(layer, seg.slot, seg.end))
            if keys.strides != vals.strides:
                vals = np.ascontiguousarray(vals)
                keys = np.ascontiguousarray(keys)
            k.lib.llamanb_cpu_attention(qkv[seg.row:].ctypes.data, Q, seg.n, seg.start, Nh, Nkv,
                                        d, keys.ctypes.data, vals.ctypes.data,
                                        keys.strides[0] // 4, attn[seg.row:].ctypes.data,
                                        self.scale, int(rnd))
        self._mm(attn, w["wo"], x, accumulate=True)                      # x += attn @ wo.T

        # --- FFN sub-block (SwiGLU) ----------------------------------------------------------
        h = k.rmsnorm(x, w["ffn_norm"], c.rms_eps, rnd)                   # [R, H]
        gu = self._mm(h, w["gate_up"], np.empty((R, 2 * c.ffn), np.float32))   # [R, 2 F]
        a = np.empty((R, c.ffn), dtype=np.float32)                       # [R, F]
        k.lib.llamanb_cpu_silu_mul(gu.ctypes.data, a.ctypes.data, R, c.ffn, int(rnd))
        self._mm(a, w["down"], x, accumulate=True)                       # x += a @ down.T
        return x

    @staticmethod
    def _kv_view(a: np.ndarray) -> np.ndarray:
        """[Nkv, T, d] float32 with rows of d contiguous (a head may be strided): the kernel's
        layout; anything else is copied."""
        if a.dtype != np.float32 or a.strides[2] != 4 or a.strides[1] != a.shape[2] * 4:
            a = np.ascontiguousarray(a, dtype=np.float32)
        return a

    def read_weights(self) -> int:
        """Every packed matrix a decode token multiplies -- each layer's four products in order,
        then the LM head -- read as the products share their panels among the threads, and not
        multiplied (Kernels.panel_reader): the wrapping sum of their 32-bit words. The bench
        times it beside the decode: how long a bare read of what a token's products read takes."""
        if self._reader is None:
            self._reader = self.k.panel_reader(
                [lw[n] for lw in self.layer_w for n in ("wqkv", "wo", "gate_up", "down")] +
                [self.lm_head])
        return self._reader()

    def head(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        h = self.k.rmsnorm(x, self.final_norm, self.config.rms_eps, self.bf16)   # [n, H]
        return self._mm(h, self.lm_head, np.empty((x.shape[0], self.lm_head.shape[0]),
                                                 np.float32))                    # [n, V]
