"""Solutions to the exercises of notebook 04 (the KV cache)."""
import numpy as np


def kv_append(k_cache, length, k_new):
    """Write the new rows after the `length` cached ones; return the cache and the new length.
    Why: the cache keeps heads first ([N_kv, capacity, d]) so that one head's keys are contiguous
    for attention; the projection produces positions first, hence the transpose."""
    n = k_new.shape[0]
    k_cache[:, length:length + n] = k_new.transpose(1, 0, 2)            # [N_kv, n, d]
    return k_cache, length + n


def kv_bytes_per_token(c, bytes_per_element):
    """2 (K and V) x L x N_kv x d_h numbers per position.
    Why: every layer stores one key and one value per KV head; the query heads never appear."""
    return 2 * c.n_layers * c.n_kv_heads * c.head_dim * bytes_per_element
