"""The numpy reference backend: the whole Llama block, top to bottom, in float32.

With dtype="bf16" the weights are rounded to bfloat16 once, and every op's output is rounded to
bfloat16 (computation inside an op stays float32), to show what bf16 hardware does to the numbers.
"""
from __future__ import annotations

import numpy as np

from ..kv_cache import KVCache
from ..rope import apply_rope, cos_sin, rope_for
from ..weights import Weights
from .base import Backend


def to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to the nearest bfloat16 (ties to even), returned as float32."""
    import ml_dtypes

    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """x [S, H] / sqrt(mean(x^2) + eps) * w [H]."""
    ms = np.einsum("sh,sh->s", x, x, dtype=np.float32) / np.float32(x.shape[-1])
    r = (np.float32(1.0) / np.sqrt(ms + np.float32(eps)))[:, None]
    return (x * r) * w


def silu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """SwiGLU: silu(gate) * up = gate * sigmoid(gate) * up, in place on gate."""
    s = np.exp(-gate)
    s += 1.0
    np.divide(gate, s, out=s)
    s *= up
    return s


def softmax_rows(scores: np.ndarray) -> np.ndarray:
    """Numerically safe softmax over the last axis, in place."""
    scores -= scores.max(axis=-1, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=-1, keepdims=True)
    return scores


class NumpyBackend(Backend):
    name = "numpy"
    description = "numpy reference engine on the host CPU"

    def __init__(self, weights: Weights, dtype: str = "float32"):
        if dtype not in ("float32", "bf16"):
            raise ValueError(f"dtype must be float32 or bf16, got {dtype!r}")
        self.dtype = dtype
        self.rnd = to_bf16 if dtype == "bf16" else (lambda a: a)
        if dtype == "bf16":
            weights = weights.map_arrays(to_bf16)
        super().__init__(weights)
        self.freqs = rope_for(self.config)
        self.scale = np.float32(self.config.head_dim ** -0.5)

    def embed(self, ids: np.ndarray) -> np.ndarray:
        return self.rnd(super().embed(ids))

    def block(self, layer: int, x: np.ndarray, start: int, cache: KVCache) -> np.ndarray:
        c, w, rnd = self.config, self.weights.layers[layer], self.rnd
        S, Nh, Nkv, G, d = x.shape[0], c.n_heads, c.n_kv_heads, c.group, c.head_dim

        # --- attention sub-block -------------------------------------------------------------
        h = rnd(rms_norm(x, w.attn_norm, c.rms_eps))                      # [S, H]
        qkv = rnd(h @ w.wqkv.T)                                           # [S, (Nh + 2 Nkv) d]
        q = qkv[:, :Nh * d].reshape(S, Nh, d)                             # [S, Nh, d]
        k = qkv[:, Nh * d:(Nh + Nkv) * d].reshape(S, Nkv, d)              # [S, Nkv, d]
        v = qkv[:, (Nh + Nkv) * d:].reshape(S, Nkv, d)                    # [S, Nkv, d]
        cos, sin = cos_sin(np.arange(start, start + S), self.freqs)      # [S, d/2]
        q, k = rnd(apply_rope(q, cos, sin)), rnd(apply_rope(k, cos, sin))
        cache.write(layer, start, k, v)
        T = start + S
        attn = self.attention(q, cache.keys(layer, T), cache.values(layer, T), start)  # [S, Nh d]
        x = x + rnd(rnd(attn) @ w.wo.T)                                   # [S, H]
        x = rnd(x)

        # --- FFN sub-block (SwiGLU) ----------------------------------------------------------
        h = rnd(rms_norm(x, w.ffn_norm, c.rms_eps))                       # [S, H]
        gu = rnd(h @ w.w_gate_up.T)                                       # [S, 2 D_ff]
        a = rnd(silu_mul(gu[:, :c.ffn], gu[:, c.ffn:]))                   # [S, D_ff]
        return rnd(x + rnd(a @ w.w_down.T))                               # [S, H]

    def attention(self, q: np.ndarray, keys: np.ndarray, values: np.ndarray, start: int) -> np.ndarray:
        """Causal grouped-query attention.
        q [S, Nh, d] at positions start..; keys/values [Nkv, T, d] for positions 0..T-1."""
        c = self.config
        S, d, Nkv, G = q.shape[0], c.head_dim, c.n_kv_heads, c.group
        T = keys.shape[1]
        qg = q.reshape(S, Nkv, G, d).transpose(1, 2, 0, 3)               # [Nkv, G, S, d]
        scores = (qg @ keys[:, None].swapaxes(-1, -2)) * self.scale       # [Nkv, G, S, T]
        if S > 1:  # row i sees keys 0 .. start+i
            mask = np.arange(T)[None, :] > (start + np.arange(S))[:, None]  # [S, T]
            scores[..., mask] = -np.inf
        p = self.rnd(softmax_rows(scores))
        out = p @ values[:, None]                                         # [Nkv, G, S, d]
        return out.transpose(2, 0, 1, 3).reshape(S, c.n_heads * d)       # [S, Nh d]

    def head(self, x: np.ndarray) -> np.ndarray:
        h = self.rnd(rms_norm(x, self.weights.final_norm, self.config.rms_eps))  # [n, H]
        return self.rnd(h @ self.weights.lm_head.T)                       # [n, V]
