"""Number formats: what a value becomes when a device stores it.

    to_bf16(x)    float32 -> nearest bfloat16 (round to nearest, ties to even), as float32
    bf16_bits(x)  float32 -> the uint16 bit patterns of those bfloat16 values

Accelerators in this course keep tensors in bfloat16 (AMD NPU2, Furiosa RNGD) and compute
products with float32 accumulation. Block floats (Tenstorrent's bfloat8_b / bfloat4_b) join here.
"""
from __future__ import annotations

import numpy as np


def to_bf16(x: np.ndarray) -> np.ndarray:
    """Round to the nearest bfloat16 (ties to even), returned as float32."""
    import ml_dtypes

    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float32)


def bf16_bits(x: np.ndarray) -> np.ndarray:
    """The bfloat16 bit patterns (uint16) of x rounded to bfloat16."""
    import ml_dtypes

    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """uint16 bfloat16 bit patterns -> float32 (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
