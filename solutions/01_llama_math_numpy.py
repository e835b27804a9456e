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
