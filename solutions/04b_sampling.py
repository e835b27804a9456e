"""Solutions to the exercises of notebook 04b (sampling)."""
import numpy as np


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


def top_k_probs(logits, temperature, k):
    """softmax(logits / T) over the k largest logits, zero elsewhere.
    Why: dividing by T > 0 keeps the order of the logits, so the same k survive either way round;
    the softmax over the survivors alone already sums to 1."""
    z = np.asarray(logits, dtype=np.float64) / temperature
    kth = np.sort(z)[-k]                                               # the k-th largest
    e = np.where(z >= kth, np.exp(z - z.max()), 0.0)
    return e / e.sum()
