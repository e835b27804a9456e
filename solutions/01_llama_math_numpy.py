"""Solutions to the exercises of notebook 01 (Llama's math in numpy)."""
import numpy as np


def block_params(c):
    """One block: four attention projections, three FFN matrices, two RMSNorm weights.
    Why: with GQA only N_kv heads have keys and values, so W_k and W_v are H x N_kv*d_h, not H x H."""
    H = c.hidden
    attention = H * c.n_heads * c.head_dim * 2 + H * c.n_kv_heads * c.head_dim * 2   # q, o; k, v
    ffn = 3 * H * c.ffn                                                              # gate, up, down
    norms = 2 * H                                                                    # attn_norm, ffn_norm
    return attention + ffn + norms


def rms_norm(x, gamma, eps):
    """x [S, H] / sqrt(mean(x^2) + eps) * gamma [H].
    Why: RMSNorm rescales each row to unit root-mean-square; eps keeps an all-zero row finite."""
    ms = np.mean(x * x, axis=-1, keepdims=True)                   # [S, 1]
    return x / np.sqrt(ms + np.float32(eps)) * gamma


def prefill_flops(c, S):
    """Every matrix product costs 2 FLOPs per multiply-add.
    Why: the projections see S rows each; causal attention pairs query i with keys 0..i, which is
    S(S+1)/2 pairs per head, once for Q.K and once for the weighted sum of V; generation needs the
    LM head on the last row only."""
    H, F = c.hidden, c.ffn
    q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    projections = 2 * S * (H * q_dim + 2 * H * kv_dim + q_dim * H + 3 * H * F)
    pairs = S * (S + 1) // 2
    attention = 2 * 2 * c.n_heads * c.head_dim * pairs
    return c.n_layers * (projections + attention) + 2 * H * c.vocab
