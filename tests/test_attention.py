"""llamanb.engine.attention against a float64 softmax(Q K^T / sqrt(d) + mask) V, for all three layouts
(one block, decode, prefill in query blocks over whole key tiles): grouped-query heads (query head
h reads K/V head h // G), the causal mask, and per-row lengths (row i at position start + i sees
start + i + 1 keys; keys past them hold huge values that only the mask keeps out).

The bound is derived per query row, not tuned (u = 2^-24, gamma_n = n u / (1 - n u)):
  scores: each is a d-term float32 dot product, scaled once and shifted by the row max once, so
      |ds_j| <= Delta = gamma_d * scale * max_j sum_i |q_i k_ji| + 3 u max_j |s_j|;
  softmax: scores off by at most Delta move every p_j by a factor within exp(+-2 Delta); exp
      (numpy's float32 exp, within 4 ulp: 4 u taken), the T-term sum (gamma_T) and the division (u)
      add a relative error of 4u + gamma_T + u to each p_j;
  output: o = sum_j p_j v_j over T terms adds gamma_T sum_j p_j |v_j| <= gamma_T max|v|.
  So |o - o_ref| <= max|v| * ((exp(2 Delta) - 1) + 5u + 2 gamma_T), to first order; the test takes
  1.01 x that for the second-order terms.
"""
from __future__ import annotations

import numpy as np
import pytest

from llamanb.engine.attention import BLOCK_Q, KEY_TILE, attention

U = 2.0 ** -24


def gamma(n: int) -> float:
    return n * U / (1 - n * U)


def reference(q, K, V, start):
    """float64: q [S, Nh, d], K/V [Nkv, >= start+S, d] -> [S, Nh, d], causal from `start`."""
    S, Nh, d = q.shape
    Nkv = K.shape[0]
    G = Nh // Nkv
    T = start + S
    q64, K64, V64 = (a.astype(np.float64) for a in (q, K[:, :T], V[:, :T]))
    scale = np.float64(np.float32(d ** -0.5))
    out = np.empty((S, Nh, d))
    mask = np.where(np.arange(T)[None, :] > (start + np.arange(S))[:, None], -np.inf, 0.0)
    for h in range(Nh):
        s = q64[:, h] @ K64[h // G].T * scale + mask                 # [S, T]
        p = np.exp(s - s.max(1, keepdims=True))
        out[:, h] = (p / p.sum(1, keepdims=True)) @ V64[h // G]
    return out


def bound(q, K, V, start):
    """Per query row: the derived bound above, [S]."""
    S, Nh, d = q.shape
    G = Nh // K.shape[0]
    T = start + S
    scale = float(np.float32(d ** -0.5))
    out = np.zeros(S)
    for i in range(S):
        n = start + i + 1                                              # keys row i sees
        for h in range(Nh):
            k, v = K[h // G, :n].astype(np.float64), V[h // G, :n].astype(np.float64)
            qa = np.abs(q[i, h].astype(np.float64))
            A = scale * (np.abs(k) @ qa).max()
            M = np.abs(scale * (k @ q[i, h].astype(np.float64))).max()
            delta = gamma(d) * A + 3 * U * M
            b = np.abs(v).max() * (np.expm1(2 * delta) + 5 * U + 2 * gamma(T))
            out[i] = max(out[i], 1.01 * b)
    return out


def make(rng, S, start, Nh, Nkv, d, capacity):
    q = rng.standard_normal((S, Nh, d)).astype(np.float32)
    K = rng.standard_normal((Nkv, capacity, d)).astype(np.float32)
    V = rng.standard_normal((Nkv, capacity, d)).astype(np.float32)
    K[:, start + S:] = 1e4                                             # past every row's length:
    V[:, start + S:] = 1e4                                             # only the mask hides them
    return q, K, V


@pytest.mark.parametrize("S,start,block_q", [
    (1, 0, BLOCK_Q), (1, 37, BLOCK_Q),                    # decode
    (5, 0, BLOCK_Q), (150, 0, BLOCK_Q), (40, 100, BLOCK_Q), (BLOCK_Q + 1, 3, BLOCK_Q),  # blocks
    (7, 0, None), (33, 12, None), (1, 9, None),            # one block
])
def test_attention_against_float64(S, start, block_q):
    rng = np.random.default_rng(S * 1000 + start)
    Nh, Nkv, d = 6, 2, 16                                   # GQA: 3 query heads per K/V head
    capacity = -(-(start + S) // KEY_TILE) * KEY_TILE       # whole key tiles, as a cache holds
    q, K, V = make(rng, S, start, Nh, Nkv, d, capacity)
    q *= 2.0                                                # sharper softmax than N(0, 1)
    got = attention(q, lambda T: K[:, :T], lambda T: V[:, :T], start, np.float32(d ** -0.5), Nkv,
                    block_q=block_q)
    assert got.shape == (S, Nh * d) and got.dtype == np.float32
    want = reference(q, K, V, start)
    err = np.abs(got.reshape(S, Nh, d) - want).max(axis=(1, 2))        # [S]
    b = bound(q, K, V, start)
    assert (err <= b).all(), (err.max(), b[err.argmax()])
    assert b.max() < 1e-4 * np.abs(V[:, :start + S]).max()              # the bound is not vacuous


def test_rows_see_only_their_own_prefix():
    """Changing key/value j changes exactly the rows at positions >= j (causality), GQA groups
    only: a K/V head's change reaches its G query heads and no other."""
    rng = np.random.default_rng(7)
    S, start, Nh, Nkv, d = 20, 5, 4, 2, 8
    q, K, V = make(rng, S, start, Nh, Nkv, d, KEY_TILE)
    run = lambda K, V: attention(q, lambda T: K[:, :T], lambda T: V[:, :T], start,   # noqa: E731
                                 np.float32(d ** -0.5), Nkv).reshape(S, Nh, d)
    base = run(K, V)
    j = start + 7
    V2 = V.copy()
    V2[1, j] += 1.0                                         # K/V head 1: query heads 2, 3
    changed = np.abs(run(K, V2) - base).max(axis=2) > 0     # [S, Nh]
    rows = start + np.arange(S) >= j
    assert (changed[:, 2:] == rows[:, None]).all() and not changed[:, :2].any()


def test_blocked_rows_do_not_depend_on_later_rows():
    """Prefill in fixed-shape blocks: the first BLOCK_Q rows come out bit-identical whether the
    prompt stops there or goes on (what makes padded and chunked prefill bit-identical)."""
    rng = np.random.default_rng(3)
    S, Nh, Nkv, d = BLOCK_Q + 30, 4, 2, 8
    q, K, V = make(rng, S, 0, Nh, Nkv, d, 2 * KEY_TILE)
    run = lambda q: attention(q, lambda T: K[:, :T], lambda T: V[:, :T], 0,   # noqa: E731
                              np.float32(d ** -0.5), Nkv)
    assert np.array_equal(run(q[:BLOCK_Q]), run(q)[:BLOCK_Q])
