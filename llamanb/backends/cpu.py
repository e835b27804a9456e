"""The cpu backend: the Llama block in the course's own C++ kernels (kernels/cpu), on the host CPU.

    x [R, H] --rmsnorm--> --qkv matmul--> --rope (q, k)--> cache.write --attention per sequence-->
             --wo matmul, += x--> --rmsnorm--> --gate|up matmul--> --silu*mul--> --down, += x-->

Every matrix product is one kernel (kernels/cpu/matmul.cc) over weights stored [out, in], the
layout the model already has (gate and up packed as one [2 D_ff, H] matrix), so float32 weights
are used where they lie (memory-mapped from the store); `dtype="bf16"` converts them once to
bfloat16 bit patterns, halving the bytes a decode step reads. The kernel streams each weight row
once per step and multiplies every activation row against it, so a step of 8 decoding
sequences reads the weights once, as one does.

Each output element is one thread's dot product, in the same order whatever the other rows of
the step are: a row's result does not depend on its neighbours, so the engine need not pad
(row_multiple = row_align = 1). With dtype="bf16" every op's output is rounded to bfloat16, as
the numpy engine's bf16 mode does.

The KV cache is the engine's (contiguous or paged): attention reads `cache.keys/values`, a view
for the contiguous store and a gathered copy for the paged one.
"""
from __future__ import annotations

import ctypes

import numpy as np

from ..kv.base import KVStore
from ..kv.contiguous import KVCache
from ..numerics import to_bf16
from ..rope import cos_sin, rope_for
from ..step import Step
from ..weights import Weights
from . import cpu_kernels
from .base import Backend


class CpuBackend(Backend):
    name = "cpu"

    def __init__(self, weights: Weights, dtype: str = "float32"):
        if dtype not in ("float32", "bf16"):
            raise ValueError(f"dtype must be float32 or bf16, got {dtype!r}")
        self.k = cpu_kernels.load()                  # LlamanbError (one line) without a compiler
        super().__init__(weights)
        self.dtype, self.bf16 = dtype, dtype == "bf16"
        c = self.config
        isa = "-march=native" if self.k.native else "portable flags"
        self.description = (f"compiled C++ kernels on the host CPU ({dtype} weights, "
                            f"{self.k.vector_width}-lane vectors, {isa}, {self.k.threads} threads)")
        self.freqs = rope_for(c)
        self.scale = float(c.head_dim ** -0.5)
        self._rope_key, self._rope = None, None
        mat = lambda a: self.k.pack(a, bf16=self.bf16)                    # noqa: E731
        vec = to_bf16 if self.bf16 else (lambda a: np.ascontiguousarray(a, np.float32))
        self.layer_w = [dict(attn_norm=vec(w.attn_norm), wqkv=mat(w.wqkv), wo=mat(w.wo),
                             ffn_norm=vec(w.ffn_norm), gate_up=mat(w.w_gate_up),
                             down=mat(w.w_down)) for w in weights.layers]
        self.final_norm = vec(weights.final_norm)
        self.lm_head = mat(weights.lm_head)           # [V, H] packed
        self.weight_bytes = sum(a.nbytes for lw in self.layer_w for a in lw.values()) + \
            self.lm_head.nbytes + self.final_norm.nbytes
        # forward.cc's arguments that never change: the sizes, and 6 weight pointers per layer
        self._dims = cpu_kernels.Dims(c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim,
                                      c.ffn, int(self.bf16), int(self.bf16), c.rms_eps, self.scale)
        ptrs = [(a.data if isinstance(a, cpu_kernels.Packed) else a).ctypes.data
                for lw in self.layer_w for a in lw.values()]
        self._wptrs = (ctypes.c_void_p * len(ptrs))(*ptrs)

    def embed(self, ids: np.ndarray) -> np.ndarray:
        x = super().embed(ids)
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
        """All L blocks in one call to kernels/cpu/forward.cc when the cache is the contiguous
        float32 store (its arrays are written in place); otherwise (a paged store, or `collect`
        asking for every block's output) block by block in Python."""
        if collect is not None or not (isinstance(cache, KVCache) and cache.k_all.dtype == np.float32
                                        and cache.k_all.flags.c_contiguous):
            return super().layers(x, step, cache, collect)
        x = np.array(x, dtype=np.float32, order="C")                    # [R, H], updated in place
        for seg in step.segments:
            cache.writing(seg.slot, seg.start, seg.n)                   # room, high-water mark
        cos, sin = self.rope_tables(step.positions)                      # [R, d/2]
        segs = (cpu_kernels.Seg * len(step.segments))(*[(s.row, s.n, s.start, s.slot)
                                                        for s in step.segments])
        k_all, v_all = cache.k_all, cache.v_all                          # [slots, L, Nkv, cap, d]
        desc = cpu_kernels.CacheDesc(k_all.ctypes.data, v_all.ctypes.data, k_all.strides[0] // 4,
                                     k_all.strides[1] // 4, k_all.strides[2] // 4)
        self.k.lib.llamanb_cpu_forward(ctypes.byref(self._dims), self._wptrs, x.ctypes.data,
                                       x.shape[0], cos.ctypes.data, sin.ctypes.data, segs,
                                       len(step.segments), ctypes.byref(desc))
        return x

    def block(self, layer: int, x: np.ndarray, step: Step, cache: KVStore) -> np.ndarray:
        c, w, k, rnd = self.config, self.layer_w[layer], self.k, self.bf16
        R, Nh, Nkv, d = x.shape[0], c.n_heads, c.n_kv_heads, c.head_dim
        x = np.array(x, dtype=np.float32, order="C")                    # [R, H], updated in place

        # --- attention sub-block -------------------------------------------------------------
        h = k.rmsnorm(x, w["attn_norm"], c.rms_eps, rnd)                  # [R, H]
        Q = (Nh + 2 * Nkv) * d
        qkv = k.matmul(h, w["wqkv"], np.empty((R, Q), np.float32), rnd=rnd)   # [R, (Nh+2Nkv) d]
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
        k.matmul(attn, w["wo"], x, accumulate=True, rnd=rnd)              # x += attn @ wo.T

        # --- FFN sub-block (SwiGLU) ----------------------------------------------------------
        h = k.rmsnorm(x, w["ffn_norm"], c.rms_eps, rnd)                   # [R, H]
        gu = k.matmul(h, w["gate_up"], np.empty((R, 2 * c.ffn), np.float32), rnd=rnd)  # [R, 2 F]
        a = np.empty((R, c.ffn), dtype=np.float32)                       # [R, F]
        k.lib.llamanb_cpu_silu_mul(gu.ctypes.data, a.ctypes.data, R, c.ffn, int(rnd))
        k.matmul(a, w["down"], x, accumulate=True, rnd=rnd)               # x += a @ down.T
        return x

    @staticmethod
    def _kv_view(a: np.ndarray) -> np.ndarray:
        """[Nkv, T, d] float32 with rows of d contiguous (a head may be strided): the kernel's
        layout; anything else is copied."""
        if a.dtype != np.float32 or a.strides[2] != 4 or a.strides[1] != a.shape[2] * 4:
            a = np.ascontiguousarray(a, dtype=np.float32)
        return a

    def head(self, x: np.ndarray) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype=np.float32)
        h = self.k.rmsnorm(x, self.final_norm, self.config.rms_eps, self.bf16)   # [n, H]
        return self.k.matmul(h, self.lm_head, np.empty((x.shape[0], self.lm_head.shape[0]),
                                                      np.float32), rnd=self.bf16)  # [n, V]
