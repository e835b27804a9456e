"""Solutions to the exercises of notebook 02 (RoPE as einsum tables)."""
import numpy as np


def inv_freq(d, theta):
    """theta^(-2i/d) for i = 0 .. d/2-1, float32.
    Why: each pair of dimensions turns at its own rate, from 1 radian per position (i = 0) down to
    almost theta^-1; the power is taken in float64 and rounded once so the frequencies are exact."""
    exponents = np.arange(0, d, 2, dtype=np.float64) / d            # [d/2]: 0, 2/d, 4/d, ...
    return (1.0 / np.power(np.float64(theta), exponents)).astype(np.float32)


def rotation_table(positions, freqs):
    """[S, d/2, 2, 2]: table[s, i] = [[cos a, sin a], [-sin a, cos a]], a = positions[s] * freqs[i].
    Why: the einsum contracts the first 2x2 axis (the input member f of a pair), so the matrix is
    stored [in, out] -- the transpose of the textbook rotation."""
    angle = np.asarray(positions, dtype=np.float32)[:, None] * np.asarray(freqs, np.float32)[None, :]
    c, s = np.cos(angle.astype(np.float64)), np.sin(angle.astype(np.float64))   # [S, d/2]
    table = np.stack([np.stack([c, s], -1), np.stack([-s, c], -1)], -2)        # [S, d/2, f, o]
    return table.astype(np.float32)


def apply_table(x, table):
    """x [S, H, d] in interleaved pairs, rotated with one einsum.
    Why: viewing the last axis as (d/2, 2) puts each pair on its own axis f; the table's [f, o]
    matrix then maps the pair to its rotated value for every head at once."""
    S, H, d = x.shape
    pairs = x.reshape(S, H, d // 2, 2)                                     # [S, H, d/2, f]
    out = np.einsum("shif,sifo->shio", pairs, table)                      # [S, H, d/2, o]
    return out.reshape(S, H, d).astype(x.dtype)
