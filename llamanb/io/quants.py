"""Dequantising GGUF tensors to float32, written out block format by block format.

A GGUF tensor is a flat run of blocks. Each block holds `block_size` weights and some scale bytes:

    Q8_0  (34 B / 32 w):  d:f16 | q:int8[32]                    w = d * q
    Q4_0  (18 B / 32 w):  d:f16 | nibbles[16]                   w = d * (q - 8)
    Q4_1  (20 B / 32 w):  d:f16 m:f16 | nibbles[16]             w = d * q + m
    Q5_0  (22 B / 32 w):  d:f16 | high bits:u32 | nibbles[16]   w = d * (q - 16)
    Q5_1  (24 B / 32 w):  d:f16 m:f16 | high bits:u32 | nibbles w = d * q + m

In the 4-bit formats byte j carries weight j in its low nibble and weight j + 16 in its high one.
K-quants (super-blocks of 256) are delegated to the `gguf` package's reference numpy code.
"""
from __future__ import annotations

import numpy as np

from llamanb.errors import LlamanbError

# name -> (weights per block, bytes per block)
BLOCK = {
    "F32": (1, 4), "F16": (1, 2), "BF16": (1, 2),
    "Q8_0": (32, 34), "Q4_0": (32, 18), "Q4_1": (32, 20), "Q5_0": (32, 22), "Q5_1": (32, 24),
}
DELEGATED = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
SUPPORTED = tuple(BLOCK) + DELEGATED


def _f16(col: np.ndarray) -> np.ndarray:
    """Two bytes per row -> float32 column [n_blocks, 1]."""
    return np.ascontiguousarray(col).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    """[n, 16] bytes -> [n, 32] values 0..15: low nibbles first, then high nibbles."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)


def _high_bits(qh: np.ndarray) -> np.ndarray:
    """[n, 4] bytes = one little-endian u32 -> [n, 32] bits (bit j belongs to weight j)."""
    return np.unpackbits(np.ascontiguousarray(qh), axis=1, bitorder="little").astype(np.float32)


def dequantize(raw: np.ndarray, qtype: str, n_values: int) -> np.ndarray:
    """Flat float32 array of `n_values` weights from the raw bytes of one tensor."""
    if qtype in DELEGATED:
        import gguf

        return np.asarray(gguf.quants.dequantize(np.asarray(raw), gguf.GGMLQuantizationType[qtype]),
                          dtype=np.float32).reshape(-1)
    if qtype not in BLOCK:
        raise LlamanbError(
            f"unsupported GGUF tensor type {qtype}; llamanb reads {', '.join(SUPPORTED)}")
    raw = np.ascontiguousarray(raw).view(np.uint8).reshape(-1)
    per, nbytes = BLOCK[qtype]
    if raw.size * per != n_values * nbytes:
        raise LlamanbError(f"{qtype} tensor holds {raw.size} bytes, expected {n_values * nbytes // per}")
    if qtype == "F32":
        return raw.view(np.float32).copy()
    if qtype == "F16":
        return raw.view(np.float16).astype(np.float32)
    if qtype == "BF16":
        # bf16 is the top half of a float32: shift it into place.
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)

    b = raw.reshape(-1, nbytes)                      # [n_blocks, bytes per block]
    if qtype == "Q8_0":
        w = _f16(b[:, :2]) * b[:, 2:].view(np.int8).astype(np.float32)
    elif qtype == "Q4_0":
        w = _f16(b[:, :2]) * (_nibbles(b[:, 2:]) - 8.0)
    elif qtype == "Q4_1":
        w = _f16(b[:, :2]) * _nibbles(b[:, 4:]) + _f16(b[:, 2:4])
    elif qtype == "Q5_0":
        q = _nibbles(b[:, 6:]) + 16.0 * _high_bits(b[:, 2:6])
        w = _f16(b[:, :2]) * (q - 16.0)
    else:  # Q5_1
        q = _nibbles(b[:, 8:]) + 16.0 * _high_bits(b[:, 4:8])
        w = _f16(b[:, :2]) * q + _f16(b[:, 2:4])
    return w.reshape(-1)
