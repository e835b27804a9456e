"""Solutions to the exercises of notebook 12 (CUDA kernels after min_llm_inference)."""
import numpy as np


def kt_offset(slot, head, c, j, n_kv, d, S):
    """Flat index in kt [slots, N_kv, d, S]. Why: row-major strides are (N_kv d S, d S, S, 1):
    the key position is the fastest index, so a warp reading keys j..j+31 of one dimension reads
    32 neighbouring floats (one coalesced transaction)."""
    return ((slot * n_kv + head) * d + c) * S + j


def fill_grid(seg_lengths, n_kv, d, tile):
    """Why: each T x T block moves a T-row by T-dimension tile of one segment's keys for one K/V
    head; the grid is sized for the longest segment, and shorter segments' extra blocks exit."""
    cdiv = lambda n, m: max(1, -(-n // m))                       # noqa: E731
    return (cdiv(d, tile), cdiv(max(seg_lengths), tile), len(seg_lengths) * n_kv), (tile, tile)


def masked_softmax_row(scores, length):
    """Why: positions at and past `length` hold whatever an earlier, longer sequence left in the
    slot; they must not enter the maximum or the sum."""
    out = np.zeros(len(scores))
    if length:
        s = np.asarray(scores[:length], dtype=np.float64)
        e = np.exp(s - s.max())
        out[:length] = e / e.sum()
    return out
