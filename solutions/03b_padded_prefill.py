"""Solutions to the exercises of notebook 03b (padded prefill)."""
import numpy as np


def pad_prompt(ids, length, pad_id):
    """Right-pad with pad_id; return the real length beside the padded ids.
    Why: the length is known when the prompt is padded and cannot be recovered afterwards, because
    the prompt may contain pad_id itself (every ChatML turn ends with EOS)."""
    ids = list(ids)
    return np.array(ids + [pad_id] * (length - len(ids)), dtype=np.int64), len(ids)


def in_order_sum(xs):
    """A float32 running total, left to right.
    Why: each addition sees the same partial sum whatever follows, so trailing zeros (x + 0 == x)
    cannot change a bit -- unlike a pairwise sum, whose grouping depends on the length."""
    total = np.float32(0.0)
    for x in np.asarray(xs, np.float32):
        total = np.float32(total + x)
    return total
