"""The numpy reference backend: the whole Llama block, top to bottom, in float32.

With dtype="bf16" the weights are rounded to bfloat16 once, and every op's output is rounded to
bfloat16 (computation inside an op stays float32), to show what bf16 hardware does to the numbers.

Speed notes (2-core x86, OpenBLAS; measured, see README "Benchmark"):
- Decode is a chain of matrix-vector products, bound by memory bandwidth. OpenBLAS streams
  `x @ W` with W stored [in, out] faster than `W @ x` with W [out, in] for gate/up and the LM head,
  and slower for q/k/v and down; those two matrices get a transposed copy, derived once and
  memory-mapped from the cache directory.
- Prefill is GEMM-bound (OpenBLAS sgemm reaches ~145 GFLOP/s at these shapes). Elementwise work
  runs on one core; splitting it across threads measured slower, because OpenBLAS's idle workers
  spin on the other core between GEMMs.
"""
from __future__ import annotations

import numpy as np

from llamanb.engine.attention import BLOCK_Q, KEY_TILE, attention
from llamanb.platform.blas import row_align, row_multiple
from llamanb.engine.kv.base import KVStore
from llamanb.engine.step import Step
from llamanb.model.numerics import to_bf16
from llamanb.model.ops import rms_norm, silu_mul
from llamanb.model.rope import cos_sin, rope_for, rope_inplace, rotation_tables
from llamanb.model.weights import Weights
from llamanb.engine.backend import Backend



class NumpyBackend(Backend):
    name = "numpy"
    description = "numpy reference engine on the host CPU"

    def __init__(self, weights: Weights, dtype: str = "float32"):
        if dtype not in ("float32", "bf16"):
            raise ValueError(f"dtype must be float32 or bf16, got {dtype!r}")
        self.dtype = dtype
        self.row_multiple = row_multiple()         # see llamanb.platform.blas: rows computed uniformly
        self.row_align = row_align()               # ... and at which offsets within a GEMM
        self.kv_position_multiple = KEY_TILE        # prefill attention reads whole key tiles
        self.query_tile = BLOCK_Q                   # ... in blocks of this many query rows
        self.rnd = to_bf16 if dtype == "bf16" else (lambda a: a)
        if dtype == "bf16":
            weights = weights.map_arrays(to_bf16)
        super().__init__(weights)
        c = self.config
        self.freqs = rope_for(c)
        self.scale = np.float32(c.head_dim ** -0.5)
        self._rope_key, self._rope = None, None
        # [in, out] copies of the matrices OpenBLAS streams faster that way (see module doc)
        t = weights.derived("numpy-layout-v1", {
            **{f"gate_up_t.{i}": ((c.hidden, 2 * c.ffn), lambda i=i: weights.layers[i].w_gate_up.T)
               for i in range(c.n_layers)},
            "lm_head_t": ((c.hidden, c.vocab), lambda: weights.lm_head.T)})
        self.gate_up_t = [t[f"gate_up_t.{i}"] for i in range(c.n_layers)]   # [H, 2 D_ff]
        self.lm_head_t = t["lm_head_t"]                                      # [H, V]

    def embed(self, ids: np.ndarray) -> np.ndarray:
        return self.rnd(super().embed(ids))

    def rope_tables(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rotation tables [R, d] for the step's positions, made once per step (not per layer)."""
        key = positions.tobytes()
        if self._rope_key != key:
            self._rope = rotation_tables(*cos_sin(positions, self.freqs))
            self._rope_key = key
        return self._rope

    def block(self, layer: int, x: np.ndarray, step: Step, cache: KVStore) -> np.ndarray:
        c, w, rnd = self.config, self.weights.layers[layer], self.rnd
        R, Nh, Nkv, d, F = x.shape[0], c.n_heads, c.n_kv_heads, c.head_dim, c.ffn

        # --- attention sub-block -------------------------------------------------------------
        h = rnd(rms_norm(x, w.attn_norm, c.rms_eps))                      # [R, H]
        qkv = rnd(h @ w.wqkv.T)                                           # [R, (Nh + 2 Nkv) d]
        qk = qkv[:, :(Nh + Nkv) * d].reshape(R, Nh + Nkv, d)              # [R, Nh + Nkv, d]
        rope_inplace(qk, *self.rope_tables(step.positions))              # q and k, one pass
        qk = rnd(qk)
        q, k = qk[:, :Nh], qk[:, Nh:]                                     # [R, Nh, d], [R, Nkv, d]
        v = qkv[:, (Nh + Nkv) * d:].reshape(R, Nkv, d)                    # [R, Nkv, d]
        if len(step.segments) == 1 and step.segments[0].n == R:           # one sequence, no padding
            seg = step.segments[0]
            cache.write(layer, seg.slot, seg.start, k, v)
            attn = self.attention(q, cache, layer, seg.slot, seg.start)   # [R, Nh d]
        else:
            attn = np.zeros((R, Nh * d), dtype=np.float32)                # padding rows stay 0
            for seg in step.segments:                                     # each sequence its own keys
                r = seg.rows
                cache.write(layer, seg.slot, seg.start, k[r], v[r])
                attn[r] = self.attention(q[r], cache, layer, seg.slot, seg.start)
        attn = rnd(attn)
        x = rnd(x + rnd(attn @ w.wo.T))                                   # [R, H]

        # --- FFN sub-block (SwiGLU) ----------------------------------------------------------
        h = rnd(rms_norm(x, w.ffn_norm, c.rms_eps))                       # [S, H]
        gu = rnd(h @ self.gate_up_t[layer])                               # [S, 2 D_ff]
        a = rnd(silu_mul(gu[:, :F], gu[:, F:]))                           # [S, D_ff]
        return rnd(x + rnd(a @ w.w_down.T))                               # [S, H]

    def attention(self, q: np.ndarray, cache: KVStore, layer: int, slot: int, start: int) -> np.ndarray:
        """Causal grouped-query attention for q [S, Nh, d] at positions start..start+S-1 of the
        sequence in cache slot `slot`, over its cached keys/values [Nkv, T, d]. Returns [S, Nh*d].
        llamanb.engine.attention computes it: decode one row against its keys, prefill in blocks of
        BLOCK_Q query rows over whole KEY_TILEs of keys (what makes padded prefill bit-identical)."""
        return attention(q, lambda T: cache.keys(layer, slot, T),
                         lambda T: cache.values(layer, slot, T), start, self.scale,
                         self.config.n_kv_heads, rnd=self.rnd, block_q=self.query_tile)

    def head(self, x: np.ndarray) -> np.ndarray:
        h = self.rnd(rms_norm(x, self.weights.final_norm, self.config.rms_eps))  # [n, H]
        return self.rnd(h @ self.lm_head_t)                               # [n, V]
