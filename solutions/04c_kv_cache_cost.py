"""Solutions to the exercises of notebook 04c (what the KV cache costs)."""


def kv_bytes_per_token(c, bytes_per_element):
    """2 (K and V) x L x N_kv x d_h numbers per position.
    Why: every layer stores one key and one value per KV head; the query heads never appear."""
    return 2 * c.n_layers * c.n_kv_heads * c.head_dim * bytes_per_element


def max_batch(c, seq, memory_bytes):
    """Whole sequences of `seq` tokens whose bf16 KV cache fits beside the bf16 weights.
    Why: the weights are held once whatever the batch; every sequence adds its own cache of
    2 L N_kv d_h seq numbers, so what is left after the weights is divided among sequences."""
    room = memory_bytes - c.n_params() * 2
    per_sequence = kv_bytes_per_token(c, 2) * seq
    return max(0, room // per_sequence)
