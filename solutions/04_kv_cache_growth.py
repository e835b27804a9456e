"""Solutions to the exercises of notebook 04 (the KV cache and sampling)."""
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


def top_p_probs(logits, top_p):
    """The nucleus: the most likely tokens until their mass reaches top_p, renormalised.
    Why: a token is kept if the mass of the tokens strictly before it is still below top_p, so
    the token that crosses the threshold stays in (top_p = 0.01 keeps the arg-max)."""
    z = np.asarray(logits, dtype=np.float64)
    probs = np.exp(z - z.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    before = np.cumsum(probs[order]) - probs[order]                    # mass of the better tokens
    keep = np.zeros(probs.size, dtype=bool)
    keep[order[before < top_p]] = True
    out = np.where(keep, probs, 0.0)
    return out / out.sum()
