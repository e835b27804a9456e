"""The plainest Llama forward pass, in float64: read it top to bottom.

    forward(weights, ids, rows) -> logits [len(rows), V], float64

Like llama2.c's run.c, this is the whole model in one function and a few helpers, with nothing in
the way: no KV cache, no padding, no tiles, no batching, one sequence, every position at once.

    x = embed[ids]                                   [S, H]     one row per token
    for each of the L layers:
        h = rmsnorm(x) * attn_norm                   [S, H]
        q, k, v = h @ Wq.T, h @ Wk.T, h @ Wv.T       [S, Nh, d], [S, Nkv, d], [S, Nkv, d]
        q, k = rope(q), rope(k)                      rotate pairs (i, i + d/2) by pos * f_i
        a = softmax(q k^T / sqrt(d) + causal) v      [S, Nh, d]  query head n reads kv head n // G
        x = x + a @ Wo.T                             [S, H]      residual
        h = rmsnorm(x) * ffn_norm                    [S, H]
        x = x + (silu(h @ Wgate.T) * (h @ Wup.T)) @ Wdown.T      [S, H]  residual
    logits = rmsnorm(x[rows]) * final_norm @ lm_head.T           [n, V]

The symbols: S tokens, H hidden, L layers, Nh query heads, Nkv key/value heads, G = Nh / Nkv query
heads per key/value head, d = H / Nh head size, D_ff the MLP's width, V the vocabulary.

Why float64. Two float32 engines (llamanb's, HF transformers') round differently: they sum in
different orders, fuse different ops, and their BLAS libraries pick kernels by shape and alignment,
so their difference is the sum of two rounding errors. Against this evaluation of the same weights
(the GGUF values widened exactly; float64's rounding eight orders of magnitude below float32's)
each engine's own error is visible, and a bound on their difference can be derived instead of
guessed (chapter 00). It is checked against transformers run in float64 (tests/check/test_float64.py).

One layer's weights are widened at a time (the whole model in float64 would be ~1 GB). Slow on
purpose: clarity over speed.
"""
from __future__ import annotations

import numpy as np

from llamanb.model.weights import Weights


def inv_freq64(head_dim: int, theta: float, scaling=None) -> np.ndarray:
    """[d/2] RoPE frequencies f_i = theta^(-2i/d) in float64, with Llama 3's frequency-dependent
    scaling if given: long wavelengths slowed down by `factor`, short ones kept, a blend between."""
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


def rmsnorm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """x [S, H] divided by its root mean square (eps inside the root), times the weight w [H]."""
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x [S, n, d]: each pair (x_i, x_{i+d/2}) (the half-split order of HF checkpoints) rotated by
    the angle pos * f_i; cos, sin [S, d/2] of those angles."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]                                 # [S, n, d/2] each
    c, s = cos[:, None, :], sin[:, None, :]                               # [S, 1, d/2]
    return np.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)


def softmax(scores: np.ndarray) -> np.ndarray:
    """Along the last axis; the row maximum subtracted first (exp of -inf is 0: masked keys)."""
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    return p / p.sum(axis=-1, keepdims=True)


def silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def forward(weights: Weights, ids, rows=None) -> np.ndarray:
    """Logits [len(rows), V] in float64 for the token ids at positions 0..S-1 (rows: whose logits
    to return; default every position)."""
    c = weights.config
    ids = np.asarray(ids, dtype=np.int64)
    S, Nh, Nkv, d, F = len(ids), c.n_heads, c.n_kv_heads, c.head_dim, c.ffn
    G = Nh // Nkv                                                         # query heads per kv head
    rows = np.arange(S) if rows is None else np.asarray(rows)

    # RoPE angles of every position, and the causal mask: query s sees keys t <= s
    angle = np.arange(S, dtype=np.float64)[:, None] * inv_freq64(d, c.rope_theta, c.rope_scaling)
    cos, sin = np.cos(angle), np.sin(angle)                               # [S, d/2]
    future = np.triu(np.ones((S, S), dtype=bool), k=1)                    # [S, S] key t > query s

    x = weights.embed[ids].astype(np.float64)                             # [S, H]
    for lw in weights.layers:
        # attention: q, k, v from one fused matrix [(Nh + 2 Nkv) d, H]
        h = rmsnorm(x, lw.attn_norm.astype(np.float64), c.rms_eps)        # [S, H]
        qkv = h @ lw.wqkv.astype(np.float64).T                            # [S, (Nh + 2 Nkv) d]
        q = rope(qkv[:, :Nh * d].reshape(S, Nh, d), cos, sin)             # [S, Nh, d]
        k = rope(qkv[:, Nh * d:(Nh + Nkv) * d].reshape(S, Nkv, d), cos, sin)    # [S, Nkv, d]
        v = qkv[:, (Nh + Nkv) * d:].reshape(S, Nkv, d)                    # [S, Nkv, d]
        k, v = np.repeat(k, G, axis=1), np.repeat(v, G, axis=1)           # [S, Nh, d] head n: kv n//G
        scores = np.einsum("snd,tnd->nst", q, k) / np.sqrt(d)             # [Nh, S, S]
        scores[:, future] = -np.inf
        a = np.einsum("nst,tnd->snd", softmax(scores), v).reshape(S, Nh * d)    # [S, Nh d]
        x = x + a @ lw.wo.astype(np.float64).T                            # [S, H] residual

        # MLP: SwiGLU, gate and up from one fused matrix [2 D_ff, H]
        h = rmsnorm(x, lw.ffn_norm.astype(np.float64), c.rms_eps)         # [S, H]
        gu = h @ lw.w_gate_up.astype(np.float64).T                        # [S, 2 D_ff]
        gate, up = gu[:, :F], gu[:, F:]                                   # [S, D_ff] each
        x = x + (silu(gate) * up) @ lw.w_down.astype(np.float64).T        # [S, H] residual

    # the head: final norm on the rows asked for, then the LM head [V, H] in slices of V
    h = rmsnorm(x[rows], weights.final_norm.astype(np.float64), c.rms_eps)   # [n, H]
    logits = np.empty((len(rows), c.vocab), dtype=np.float64)            # [n, V]
    for v0 in range(0, c.vocab, 8192):
        logits[:, v0:v0 + 8192] = h @ weights.lm_head[v0:v0 + 8192].astype(np.float64).T
    return logits
