"""Solutions to the exercises of notebook 03 (attention and its masks)."""
import numpy as np


def gqa_scores(q, k):
    """[N_kv, G, S, T] scores with the group as an axis: no K head is copied.
    Why: query head h reads K head h // G, so splitting N_h into (N_kv, G) -- in that order --
    lines every query head up with its K head, and the einsum broadcasts K over G."""
    S, Nh, d = q.shape
    T, Nkv, _ = k.shape
    qg = q.reshape(S, Nkv, Nh // Nkv, d)                                   # [S, N_kv, G, d]
    return np.einsum("sngd,tnd->ngst", qg, k) / np.float32(np.sqrt(d))     # [N_kv, G, S, T]


def causal_mask(S, start):
    """[S, start + S] additive mask for S queries at positions start .. start + S - 1.
    Why: the cached keys 0 .. start - 1 are all in the past of every query of the chunk; within
    the chunk, query i may read keys up to its own position start + i."""
    T = start + S
    visible = np.arange(T)[None, :] <= (start + np.arange(S))[:, None]        # [S, T]
    return np.where(visible, np.float32(0), np.float32(-np.inf))
