"""Solutions to the exercises of notebook 04 (the KV cache)."""
import numpy as np


def kv_append(k_cache, length, k_new):
    """Write the new rows after the `length` cached ones; return the cache and the new length.
    Why: the cache keeps heads first ([N_kv, capacity, d]) so that one head's keys are contiguous
    for attention; the projection produces positions first, hence the transpose."""
    n = k_new.shape[0]
    k_cache[:, length:length + n] = k_new.transpose(1, 0, 2)            # [N_kv, n, d]
    return k_cache, length + n


def decode_attention(q, k_cache, v_cache, length):
    """One query row per head against the `length` cached positions; heads concatenated.
    Why: the new token's key and value are already in the cache (row length - 1), causality lets
    it see every cached row, and the rows past `length` are empty capacity that must not be read.
    With GQA, query head h shares KV head h // (N_h / N_kv)."""
    n_h, d = q.shape
    group = n_h // k_cache.shape[0]
    out = np.empty((n_h, d), dtype=np.float32)
    for h in range(n_h):
        keys, values = k_cache[h // group, :length], v_cache[h // group, :length]
        s = keys @ q[h] / np.sqrt(d)                                        # [length]
        p = np.exp(s - s.max())
        out[h] = (p / p.sum()) @ values
    return out.reshape(-1)
