"""RoPE as a table of 2x2 rotation matrices applied with one einsum (the layout a tensor-contraction
accelerator wants), in the interleaved pairing of llama.cpp / GGUF / Meta's original Llama code.

    table[s, i, f, o]   [S, d/2, 2, 2]   for position s and frequency i: the weight of input component
                                         f of the pair in output component o, i.e. the transpose of
                                         the textbook rotation matrix:  [[cos, sin], [-sin, cos]]
    x[s, h, 2i + f]     interleaved pairs (x_{2i}, x_{2i+1}) turn by the angle pos_s * freqs[i]

    y = einsum("shif,sifo->shio", x.reshape(S, H, d/2, 2), table).reshape(S, H, d)

`llamanb.model.rope.apply_rope` rotates HF's half-split pairs (x_i, x_{i+d/2}) instead. The two agree once
the head dimension is permuted: with P = interleaved_to_half_split(d) and Q = half_split_to_interleaved(d),

    apply_rope(x_half, cos, sin) == apply_rotation_table(x_half[..., Q], table)[..., P]
"""
from __future__ import annotations

import numpy as np

from llamanb.model.rope import cos_sin


def rotation_table(positions, freqs: np.ndarray) -> np.ndarray:
    """[S, d/2, 2, 2] float32: one rotation per position and frequency, stored [in, out]
    (table[s, i] = [[cos a, sin a], [-sin a, cos a]] with a = positions[s] * freqs[i]).

    cos/sin are llamanb.model.rope.cos_sin's, so the table holds exactly the engine's numbers."""
    cos, sin = cos_sin(np.asarray(positions), np.asarray(freqs, dtype=np.float32))   # [S, d/2] each
    table = np.empty(cos.shape + (2, 2), dtype=np.float32)
    table[..., 0, 0] = cos          # x_even -> y_even
    table[..., 0, 1] = sin          # x_even -> y_odd
    table[..., 1, 0] = -sin         # x_odd  -> y_even
    table[..., 1, 1] = cos          # x_odd  -> y_odd
    return table


def apply_rotation_table(x: np.ndarray, table: np.ndarray) -> np.ndarray:
    """Rotate x [..., S, n_heads, d] (interleaved pairs) by table [S, d/2, 2, 2] with one einsum.

    Leading axes (a batch) broadcast; the result has x's shape and dtype."""
    *lead, S, H, d = x.shape
    if table.shape != (S, d // 2, 2, 2) or d % 2:
        raise ValueError(f"table {table.shape} does not fit x {x.shape}: want ({S}, {d // 2}, 2, 2)")
    pairs = x.reshape(*lead, S, H, d // 2, 2)                                 # [..., S, H, d/2, f]
    out = np.einsum("...shif,sifo->...shio", pairs, table)                    # [..., S, H, d/2, o]
    return out.reshape(x.shape).astype(x.dtype, copy=False)


def interleaved_to_half_split(d: int) -> np.ndarray:
    """[d] index array P with x_half = x_inter[..., P]: the even slots (first members of the pairs)
    first, then the odd slots. P = [0, 2, ..., d-2, 1, 3, ..., d-1]."""
    if d % 2:
        raise ValueError(f"head dimension must be even, got {d}")
    return np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])


def half_split_to_interleaved(d: int) -> np.ndarray:
    """[d] index array Q with x_inter = x_half[..., Q], the inverse of `interleaved_to_half_split`:
    Q = [0, d/2, 1, d/2 + 1, ...] (slot 2i + t takes half-split dimension t*d/2 + i). This is the
    order in which llama.cpp's converter stores the rows of each head of W_q and W_k."""
    if d % 2:
        raise ValueError(f"head dimension must be even, got {d}")
    return np.arange(d).reshape(2, d // 2).T.reshape(-1)
