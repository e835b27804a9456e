"""Host attention, once: causal grouped-query attention of one sequence's query rows over its
cached keys and values. The numpy reference backend, the NPU2 backend's host attention and the
mesh layers all call `attention`.

    out = attention(q, keys, values, start, scale)                       # [S, Nh d]

q [S, Nh, d] holds the query rows of positions start .. start+S-1; `keys(T)` and `values(T)`
return the sequence's first T cached positions, [Nkv, T, d] (a KV cache's reads, or slices of
arrays). The G = Nh / Nkv query heads that share a K/V head are laid side by side, so each K/V
head needs one GEMM for its scores and one for its output; K and V are never repeated.

Three ways to lay the same arithmetic out, picked by the caller (each is a different BLAS call
shape, so each caller keeps the one whose bits it was built on):

    block_q=None     one block: scores [Nkv, G, S, T] over T = start + S keys, upper triangle
                     masked (the mesh layers)
    block_q, S == 1  decode: one query row against its T = start + 1 keys, no mask
    block_q, S > 1   prefill in blocks of block_q query rows (BLOCK_Q for the numpy backend): a
                     block ending at row r1 reads keys 0 .. start+r1 only, rounded up to a whole
                     `key_tile`, so most of the upper triangle is never computed; every block has
                     the same shape (queries zero-padded to block_q, keys masked), and since BLAS
                     picks its kernel by matrix size, a fixed shape makes each row's result
                     independent of how long the prompt is: what makes padded prefill
                     bit-identical. The cache must hold whole key tiles (kv_position_multiple).

`rnd` rounds the probabilities (bf16 backends pass llamanb.model.numerics.to_bf16).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from llamanb.model.ops import softmax_

BLOCK_Q = 128       # query rows per prefill attention block
KEY_TILE = 256      # prefill key ranges are rounded up to this (the KV cache is allocated to match)


def _same(a):
    return a


def attention(q: np.ndarray, keys: Callable[[int], np.ndarray], values: Callable[[int], np.ndarray],
              start: int, scale, n_kv: int, rnd=_same, block_q: int | None = BLOCK_Q,
              key_tile: int = KEY_TILE) -> np.ndarray:
    """Causal GQA for q [S, Nh, d] at positions start..start+S-1 over keys(T) / values(T)
    [n_kv, T, d]. Returns [S, Nh * d] float32. See the module docstring for the three layouts."""
    S, Nh, d = q.shape
    if block_q is None:
        return _one_block(q, keys(start + S), values(start + S), start, scale, rnd)
    Nkv, G = n_kv, Nh // n_kv
    qg = q.reshape(S, Nkv, G, d)                                          # [S, Nkv, G, d]
    if S == 1:         # decode: one query row, no padding to be invariant to: keys contiguous
        scores = qg[0] @ keys(start + 1).swapaxes(-1, -2)                 # [Nkv, G, T]
        scores *= scale
        p = rnd(softmax_(scores, axis=-1))
        out = p @ values(start + 1)                                       # [Nkv, G, d]
        return out.reshape(1, Nh * d)
    B = block_q
    out = np.empty((S, Nkv, G, d), dtype=np.float32)
    qt = np.zeros((Nkv, d, G, B), dtype=np.float32)                      # one padded query tile
    for r0 in range(0, S, B):
        r1 = min(r0 + B, S)
        Tp = -(-(start + r1) // key_tile) * key_tile                      # keys, rounded up
        qt[..., :r1 - r0] = qg[r0:r1].transpose(1, 3, 2, 0)               # [Nkv, d, G, s]
        qt[..., r1 - r0:] = 0.0
        scores = keys(Tp) @ qt.reshape(Nkv, d, G * B)                     # [Nkv, Tp, G B]
        scores *= scale
        # query row j (position start+r0+j) sees keys 0 .. start+r0+j
        hidden = np.arange(Tp)[:, None] > (start + r0 + np.arange(B))[None, :]    # [Tp, B]
        scores.reshape(Nkv, Tp, G, B)[...] += np.where(hidden, -np.inf, 0.0).astype(
            np.float32)[:, None, :]
        p = rnd(softmax_(scores, axis=-2))                                # [Nkv, Tp, G B]
        ob = p.swapaxes(-1, -2) @ values(Tp)                              # [Nkv, G B, d]
        out[r0:r1] = ob.reshape(Nkv, G, B, d)[:, :, :r1 - r0].transpose(2, 0, 1, 3)
    return out.reshape(S, Nh * d)                                         # [S, Nh d]


def _one_block(q, keys, vals, start, scale, rnd):
    """q [S, nq, d], keys/vals [nkv, T, d] -> [S, nq d]: all S rows against all T keys at once."""
    S, nq, d = q.shape
    nkv, T = keys.shape[0], keys.shape[1]
    G = nq // nkv
    qg = q.reshape(S, nkv, G, d).transpose(1, 2, 0, 3)                   # [nkv, G, S, d]
    scores = np.matmul(qg, keys[:, None].swapaxes(-1, -2)) * scale       # [nkv, G, S, T]
    hidden = np.arange(T)[None, :] > (start + np.arange(S))[:, None]     # [S, T]
    scores[..., hidden] = -np.inf
    p = rnd(softmax_(scores, axis=-1))
    o = np.matmul(p, vals[:, None])                                      # [nkv, G, S, d]
    return o.transpose(2, 0, 1, 3).reshape(S, nq * d)
