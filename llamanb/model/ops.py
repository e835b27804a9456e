"""The numpy ops every backend and notebook shares: one definition of each.

    rms_norm  x [S, H], w [H]        -> [S, H]
    silu_mul  gate [S, F], up [S, F] -> [S, F]      (SwiGLU's elementwise half)
    softmax_  scores, axis           -> scores      (in place)

All work in float32; a bf16 backend rounds the outputs (see numerics.to_bf16).
"""
from __future__ import annotations

import numpy as np


def rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    """x [S, H] / sqrt(mean(x^2) + eps) * w [H]."""
    if x.shape[0] == 1:                                   # decode: one row, one dot product
        ms = np.dot(x[0], x[0]) / np.float32(x.shape[-1])
    else:
        ms = np.square(x).sum(axis=-1, keepdims=True) / np.float32(x.shape[-1])   # [S, 1]
    out = x * (np.float32(1.0) / np.sqrt(ms + np.float32(eps)))
    out *= w
    return out


def silu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """SwiGLU: silu(gate) * up = gate / (1 + exp(-gate)) * up.   [S, D_ff] -> [S, D_ff]"""
    s = np.negative(gate)
    np.exp(s, out=s)
    s += np.float32(1.0)
    np.divide(gate, s, out=s)
    s *= up
    return s


def softmax_(scores: np.ndarray, axis: int) -> np.ndarray:
    """Numerically safe softmax over `axis`, in place.

    Prefill puts the keys on axis -2 of a [.., T, columns] score block on purpose: along a
    non-contiguous axis numpy accumulates the sum strictly in key order, so masked keys appended
    at the end (exp(-inf) = 0) add exact zeros and cannot change a single bit of the result.
    (Summing along a contiguous axis uses pairwise blocks whose grouping depends on the length,
    and padding would change the rounding.) Decode has no padding to be invariant to and keeps
    keys on the contiguous last axis."""
    scores -= scores.max(axis=axis, keepdims=True)
    np.exp(scores, out=scores)
    scores /= scores.sum(axis=axis, keepdims=True)
    return scores


def softmax(scores: np.ndarray, axis: int = -1) -> np.ndarray:
    """softmax_ on a float32 copy."""
    return softmax_(np.array(scores, dtype=np.float32), axis)
