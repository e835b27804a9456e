"""Solutions to the exercises of notebook 01b (FLOPs of a prefill)."""


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


def decode_flops(c, context):
    """One row through every matrix, one query against context + 1 keys.
    Why: the new token's key is written to the cache before attention reads it, so the query sees
    the context and itself; every weight matrix does one multiply-add per number it holds."""
    H, F = c.hidden, c.ffn
    q_dim, kv_dim = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
    projections = 2 * (H * q_dim + 2 * H * kv_dim + q_dim * H + 3 * H * F)
    attention = 2 * 2 * c.n_heads * c.head_dim * (context + 1)
    return c.n_layers * (projections + attention) + 2 * H * c.vocab
