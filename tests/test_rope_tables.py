"""RoPE as a [S, d/2, 2, 2] rotation table applied with one einsum (interleaved pairs), checked against
transformers' apply_rotary_pos_emb (half-split pairs, cos/sin from LlamaRotaryEmbedding) and closed forms."""
from __future__ import annotations

import numpy as np
import pytest
from conftest import llamacpp_permute_rows

from llamanb.model.config import RopeScaling
from llamanb.model.rope import inv_freq
from llamanb.model.rope_tables import (apply_rotation_table, half_split_to_interleaved, interleaved_to_half_split, rotation_table)

LLAMA32_SCALING = {"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}
# (head_dim, theta, llama3 scaling or None, n_heads, n_kv_heads)
CONFIGS = {
    "smollm2-like": (64, 100000.0, None, 9, 3),
    "llama3.2-1b-like": (64, 500000.0, LLAMA32_SCALING, 32, 8),
    "tiny-llama3": (16, 10000.0, {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                  "original_max_position_embeddings": 32}, 4, 2),
}
POSITIONS = np.concatenate([np.arange(0, 40), [255, 1000, 4095, 8191, 8192, 20000, 131071]])


def _hf_rope(q, k, head_dim, theta, scaling, n_heads, n_kv, positions):
    """transformers' own RoPE on q [S, n_heads, d], k [S, n_kv, d] (half-split), as numpy."""
    import torch
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

    kw = {"rope_scaling": {"rope_type": "llama3", **scaling}} if scaling else {}
    cfg = LlamaConfig(hidden_size=n_heads * head_dim, num_attention_heads=n_heads, num_key_value_heads=n_kv,
                      head_dim=head_dim, rope_theta=theta, max_position_embeddings=131072, **kw)
    qt = torch.from_numpy(q).permute(1, 0, 2)[None]                  # [1, H, S, d]
    kt = torch.from_numpy(k).permute(1, 0, 2)[None]
    cos, sin = LlamaRotaryEmbedding(cfg)(qt, torch.from_numpy(np.asarray(positions))[None])   # [1, S, d]
    q_ref, k_ref = apply_rotary_pos_emb(qt, kt, cos, sin)
    return q_ref[0].permute(1, 0, 2).numpy(), k_ref[0].permute(1, 0, 2).numpy()


def _table_rope(x_half, freqs, positions):
    """Half-split x -> interleaved order -> one einsum with the table -> back to half-split order."""
    d = x_half.shape[-1]
    x_inter = x_half[..., half_split_to_interleaved(d)]
    return apply_rotation_table(x_inter, rotation_table(positions, freqs))[..., interleaved_to_half_split(d)]


@pytest.mark.parametrize("which", list(CONFIGS))
def test_table_einsum_matches_transformers_apply_rotary_pos_emb(which):
    d, theta, scaling, n_heads, n_kv = CONFIGS[which]
    rng = np.random.default_rng(0)
    S = len(POSITIONS)
    q = rng.standard_normal((S, n_heads, d)).astype(np.float32)
    k = rng.standard_normal((S, n_kv, d)).astype(np.float32)
    q_ref, k_ref = _hf_rope(q, k, d, theta, scaling, n_heads, n_kv, POSITIONS)
    freqs = inv_freq(d, theta, RopeScaling(**scaling) if scaling else None)
    np.testing.assert_allclose(_table_rope(q, freqs, POSITIONS), q_ref, rtol=0, atol=2e-6)
    np.testing.assert_allclose(_table_rope(k, freqs, POSITIONS), k_ref, rtol=0, atol=2e-6)
    # and without the permutation the interleaved einsum is a different function (the layouts matter)
    wrong = apply_rotation_table(q, rotation_table(POSITIONS, freqs))
    assert np.abs(wrong[1:] - q_ref[1:]).max() > 0.5


def test_table_closed_form():
    d = 16
    freqs = inv_freq(d, 10000.0)
    pos = np.arange(0, 50)
    t = rotation_table(pos, freqs).astype(np.float64)                     # [S, d/2, 2, 2]
    assert t.shape == (50, d // 2, 2, 2)
    # position 0 is exactly the identity
    np.testing.assert_array_equal(t[0], np.broadcast_to(np.eye(2), (d // 2, 2, 2)))
    # every 2x2 is a rotation: orthogonal with determinant +1
    np.testing.assert_allclose(t @ np.swapaxes(t, -1, -2), np.broadcast_to(np.eye(2), t.shape), atol=2e-7)
    np.testing.assert_allclose(np.linalg.det(t), 1.0, atol=5e-7)
    # the [in, out] layout: [[cos, sin], [-sin, cos]] of pos * freq, in float64 closed form
    a = pos[:, None] * freqs.astype(np.float64)[None, :]
    closed = np.stack([np.stack([np.cos(a), np.sin(a)], -1), np.stack([-np.sin(a), np.cos(a)], -1)], -2)
    np.testing.assert_allclose(t, closed, rtol=0, atol=1e-6)
    # rotations compose: moving by m then by n is moving by m + n (row vector times T)
    np.testing.assert_allclose(t[17] @ t[25], t[42], rtol=0, atol=1e-6)


def test_einsum_rotates_each_interleaved_pair():
    """Closed form: (x_2i, x_2i+1) -> (x_2i cos - x_2i+1 sin, x_2i sin + x_2i+1 cos), other pairs untouched."""
    rng = np.random.default_rng(1)
    S, H, d = 6, 3, 8
    x = rng.standard_normal((S, H, d)).astype(np.float32)
    freqs = inv_freq(d, 10000.0)
    pos = np.arange(3, 3 + S)
    y = apply_rotation_table(x, rotation_table(pos, freqs))
    a = (pos[:, None] * freqs.astype(np.float64)[None, :])[:, None, :]        # [S, 1, d/2]
    xe, xo = x[..., 0::2].astype(np.float64), x[..., 1::2].astype(np.float64)
    np.testing.assert_allclose(y[..., 0::2], xe * np.cos(a) - xo * np.sin(a), rtol=0, atol=1e-6)
    np.testing.assert_allclose(y[..., 1::2], xe * np.sin(a) + xo * np.cos(a), rtol=0, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-6)
    assert y.dtype == np.float32 and y.shape == x.shape


def test_textbook_matrix_in_the_in_out_slot_rotates_backwards():
    """The table is [in, out]. Storing the textbook [[c, -s], [s, c]] (an [out, in] matrix) in that
    slot turns every pair by -angle: the result equals the correct table at negated positions."""
    rng = np.random.default_rng(2)
    d, S = 16, 10
    x = rng.standard_normal((S, 2, d)).astype(np.float32)
    freqs = inv_freq(d, 10000.0)
    pos = np.arange(S)
    t = rotation_table(pos, freqs)
    textbook = np.swapaxes(t, -1, -2)
    np.testing.assert_allclose(apply_rotation_table(x, textbook),
                               apply_rotation_table(x, rotation_table(-pos, freqs)), rtol=0, atol=1e-6)
    assert np.abs(apply_rotation_table(x, textbook) - apply_rotation_table(x, t)).max() > 0.5


def test_batch_axes_broadcast_and_shape_check():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 3, 8)).astype(np.float32)           # [B, S, H, d]
    t = rotation_table(np.arange(5), inv_freq(8, 10000.0))
    y = apply_rotation_table(x, t)
    for b in range(2):
        np.testing.assert_array_equal(y[b], apply_rotation_table(x[b], t))
    with pytest.raises(ValueError):
        apply_rotation_table(x, t[:4])
    with pytest.raises(ValueError):
        interleaved_to_half_split(7)


def test_permutations():
    P, Q = interleaved_to_half_split(8), half_split_to_interleaved(8)
    assert P.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert Q.tolist() == [0, 4, 1, 5, 2, 6, 3, 7]
    for d in (2, 8, 64, 128):
        P, Q = interleaved_to_half_split(d), half_split_to_interleaved(d)
        np.testing.assert_array_equal(P[Q], np.arange(d))
        np.testing.assert_array_equal(Q[P], np.arange(d))


@pytest.mark.parametrize("n_heads,n_kv", [(9, 3), (4, 4)])
def test_gguf_row_order_is_the_interleaved_permutation(n_heads, n_kv):
    """llama.cpp's converter stores W_q/W_k rows per head in the order Q, so interleaved RoPE on
    x @ W_gguf.T equals HF's half-split RoPE on x @ W_hf.T, up to the same permutation of each head."""
    from llamanb.io.gguf import permute_qk, unpermute_qk

    rng = np.random.default_rng(4)
    d, hidden, S = 16, 48, 12
    wq = rng.standard_normal((n_heads * d, hidden)).astype(np.float32)
    wk = rng.standard_normal((n_kv * d, hidden)).astype(np.float32)
    # the GGUF rows, by independent index arithmetic (conftest), are Q applied within each head
    Q = half_split_to_interleaved(d)
    wq_g, wk_g = llamacpp_permute_rows(wq, n_heads), llamacpp_permute_rows(wk, n_kv)
    np.testing.assert_array_equal(wq_g, wq.reshape(n_heads, d, hidden)[:, Q].reshape(wq.shape))
    np.testing.assert_array_equal(wq_g, permute_qk(wq, n_heads))
    np.testing.assert_array_equal(unpermute_qk(wk_g, n_kv), wk)
    # rotate both ways
    x = rng.standard_normal((S, hidden)).astype(np.float32)
    pos = np.arange(S) + 7
    q_ref, k_ref = _hf_rope((x @ wq.T).reshape(S, n_heads, d), (x @ wk.T).reshape(S, n_kv, d),
                            d, 10000.0, None, n_heads, n_kv, pos)
    t = rotation_table(pos, inv_freq(d, 10000.0))
    q_cpp = apply_rotation_table((x @ wq_g.T).reshape(S, n_heads, d), t)
    k_cpp = apply_rotation_table((x @ wk_g.T).reshape(S, n_kv, d), t)
    np.testing.assert_allclose(q_cpp, q_ref[..., Q], rtol=0, atol=2e-5)
    np.testing.assert_allclose(k_cpp, k_ref[..., Q], rtol=0, atol=2e-5)
    # the attention scores of every (query head, its kv head) pair agree: a permutation of d is free
    g = n_heads // n_kv
    s_cpp = np.einsum("qhd,khd->hqk", q_cpp, np.repeat(k_cpp, g, axis=1))
    s_ref = np.einsum("qhd,khd->hqk", q_ref, np.repeat(k_ref, g, axis=1))
    np.testing.assert_allclose(s_cpp, s_ref, rtol=0, atol=1e-3)


def test_relative_position_property():
    """q_m . k_n after the rotation depends only on m - n."""
    rng = np.random.default_rng(5)
    d = 64
    freqs = inv_freq(d, 100000.0)
    q = rng.standard_normal((1, 1, d)).astype(np.float32)
    k = rng.standard_normal((1, 1, d)).astype(np.float32)

    def score(m, n):
        qm = apply_rotation_table(q, rotation_table([m], freqs))
        kn = apply_rotation_table(k, rotation_table([n], freqs))
        return float(np.sum(qm.astype(np.float64) * kn))

    for m, n in [(5, 2), (3, 9), (0, 0)]:
        base = score(m, n)
        for t in (1, 10, 100, 1000):
            assert abs(score(m + t, n + t) - base) < 2e-4, (m, n, t)
