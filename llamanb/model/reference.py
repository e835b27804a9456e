"""The same Llama forward in float64: a yardstick for float32 engines.

    forward(weights, ids, rows) -> logits [len(rows), V], float64

Two float32 engines (llamanb's numpy backend, HF transformers) round differently: they sum in
different orders, fuse different ops, and their BLAS libraries pick kernels by shape and memory
alignment. Their difference says little on its own: it is the sum of two rounding errors. Against a
float64 evaluation of the same weights (the GGUF values widened exactly; rounding error ~1e-16
relative, eight orders of magnitude below float32's) each engine's own error is visible, and a
bound on the difference can be derived from the two distances instead of guessed.

Written independently of the engine: no cache, no padding, no tiling; full causal attention over
the whole sequence, RoPE frequencies formed in float64. One layer's weights are widened at a time
(the whole model in float64 would be ~1 GB). Slow on purpose: clarity over speed.
"""
from __future__ import annotations

import numpy as np

from llamanb.model.weights import Weights


def inv_freq64(head_dim: int, theta: float, scaling=None) -> np.ndarray:
    """[d/2] theta^(-2i/d) in float64, with Llama 3's frequency-dependent scaling if given."""
    f = 1.0 / theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    if scaling is None:
        return f
    s = scaling
    wavelen = 2 * np.pi / f
    low, high = (s.original_max_position_embeddings / s.low_freq_factor,
                 s.original_max_position_embeddings / s.high_freq_factor)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor)
    out = np.where(wavelen > low, f / s.factor, f)                        # long waves slowed down
    mid = (wavelen >= high) & (wavelen <= low)
    return np.where(mid, (1 - smooth) * f / s.factor + smooth * f, out)  # blended band


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x [S, n, d], half-split pairs (i, i + d/2) rotated by pos * f_i; cos/sin [S, d/2]."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[:, None, :], sin[:, None, :]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def forward(weights: Weights, ids, rows=None) -> np.ndarray:
    """Logits [len(rows), V] in float64 for token ids at positions 0..S-1 (rows: which positions'
    logits to return; default all)."""
    c = weights.config
    ids = np.asarray(ids, dtype=np.int64)
    S, Nh, Nkv, d, F = len(ids), c.n_heads, c.n_kv_heads, c.head_dim, c.ffn
    G = Nh // Nkv
    rows = np.arange(S) if rows is None else np.asarray(rows)
    angle = np.arange(S, dtype=np.float64)[:, None] * inv_freq64(d, c.rope_theta, c.rope_scaling)
    cos, sin = np.cos(angle), np.sin(angle)                               # [S, d/2]
    future = np.triu(np.ones((S, S), dtype=bool), k=1)                    # key t > query s

    x = weights.embed[ids].astype(np.float64)                             # [S, H]
    for lw in weights.layers:
        wqkv = lw.wqkv.astype(np.float64)
        h = _rms(x, lw.attn_norm.astype(np.float64), c.rms_eps)
        qkv = h @ wqkv.T                                                  # [S, (Nh + 2 Nkv) d]
        q = _rope(qkv[:, :Nh * d].reshape(S, Nh, d), cos, sin)            # [S, Nh, d]
        k = _rope(qkv[:, Nh * d:(Nh + Nkv) * d].reshape(S, Nkv, d), cos, sin)   # [S, Nkv, d]
        v = qkv[:, (Nh + Nkv) * d:].reshape(S, Nkv, d)                    # [S, Nkv, d]
        kh, vh = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)         # head n reads kv head n//G
        scores = np.einsum("snd,tnd->nst", q, kh) / np.sqrt(d)            # [Nh, S, S]
        scores[:, future] = -np.inf
        p = np.exp(scores - scores.max(axis=-1, keepdims=True))
        p /= p.sum(axis=-1, keepdims=True)
        attn = np.einsum("nst,tnd->snd", p, vh).reshape(S, Nh * d)        # [S, Nh d]
        x = x + attn @ lw.wo.astype(np.float64).T
        h = _rms(x, lw.ffn_norm.astype(np.float64), c.rms_eps)
        gu = h @ lw.w_gate_up.astype(np.float64).T                        # [S, 2 D_ff]
        gate, up = gu[:, :F], gu[:, F:]
        x = x + (gate / (1.0 + np.exp(-gate)) * up) @ lw.w_down.astype(np.float64).T
    h = _rms(x[rows], weights.final_norm.astype(np.float64), c.rms_eps)   # [n, H]
    out = np.empty((len(rows), c.vocab), dtype=np.float64)
    step = 8192                                                           # LM head in slices of V
    for v0 in range(0, c.vocab, step):
        out[:, v0:v0 + step] = h @ weights.lm_head[v0:v0 + step].astype(np.float64).T
    return out
