"""Rotary position embedding (RoPE), half-split pairing as in HF transformers.

Dimension i of a head (i < d/2) is paired with i + d/2 and the pair is rotated by the angle
pos * inv_freq[i]. Llama 3 rescales inv_freq: long wavelengths slow down by `factor`, short ones are
kept, the band between is blended smoothly (HF's `_compute_llama3_parameters`).
"""
from __future__ import annotations

import numpy as np

from llamanb.model.config import LlamaConfig, RopeScaling


def inv_freq(head_dim: int, theta: float, scaling: RopeScaling | None = None) -> np.ndarray:
    """[d/2] float32 angular frequencies theta^(-2i/d), as HF computes them.

    The exponent is formed in float32 (as HF does) but the power is taken in float64 and rounded
    once: numpy's float32 power is off by 1-2 ulp for some i, and an error in a frequency grows
    with the position (5e-3 in cos/sin at position 131071)."""
    exps = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    f = (np.float32(1.0) / np.power(np.float64(theta), exps.astype(np.float64)).astype(np.float32))
    if scaling is None:
        return f
    s = scaling
    low_wavelen = s.original_max_position_embeddings / s.low_freq_factor
    high_wavelen = s.original_max_position_embeddings / s.high_freq_factor
    wavelen = 2 * np.pi / f
    scaled = np.where(wavelen > low_wavelen, f / s.factor, f)
    smooth = (s.original_max_position_embeddings / wavelen - s.low_freq_factor) / (
        s.high_freq_factor - s.low_freq_factor)
    blended = (1 - smooth) * scaled / s.factor + smooth * scaled
    medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
    return np.where(medium, blended, scaled).astype(np.float32)


def cos_sin(positions: np.ndarray, freqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[S, d/2] cos and sin of pos * inv_freq. The angle is formed in float32 (as HF does),
    its cosine taken in float64 and rounded once."""
    angle = np.asarray(positions, dtype=np.float32)[:, None] * freqs[None, :]
    a64 = angle.astype(np.float64)
    return np.cos(a64).astype(np.float32), np.sin(a64).astype(np.float32)


def rotation_tables(cos: np.ndarray, sin: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[S, d/2] cos/sin -> [S, d] tables (cos | cos) and (-sin | sin) for `rope_inplace`."""
    return np.concatenate([cos, cos], -1), np.concatenate([-sin, sin], -1)


def rope_inplace(x: np.ndarray, cos2: np.ndarray, sin2: np.ndarray) -> None:
    """Rotate x [S, n_heads, d] in half-split pairs, in place, as HF writes it:
    x * cos + rotate_half(x) * sin, with the halves swapped and the sign folded into sin2.
    cos2/sin2 [S, d] from `rotation_tables`. (x1*c + (-x2)*s rounds exactly like x1*c - x2*s.)"""
    half = x.shape[-1] // 2
    swapped = np.concatenate([x[..., half:], x[..., :half]], -1)       # (x2 | x1)
    swapped *= sin2[:, None, :]                                         # (-x2 s | x1 s)
    x *= cos2[:, None, :]
    x += swapped


def apply_rope(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """x [S, n_heads, d] rotated in half-split pairs (a copy); cos/sin [S, d/2]."""
    out = np.array(x)
    rope_inplace(out, *rotation_tables(cos, sin))
    return out


def rope_for(cfg: LlamaConfig) -> np.ndarray:
    return inv_freq(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
