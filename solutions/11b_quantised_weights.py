"""Solutions to the exercises of notebook 11b (quantised weights decoded in registers)."""
import numpy as np


def q4_1_decode(block):
    """The 32 float32 weights of one 20-byte Q4_1 block.
    Why: d and m are float16 (exact in float32); byte j carries weight j (low nibble) and weight
    j + 16 (high nibble); d * q is exact in float32, so w = d * q + m rounds once."""
    b = np.asarray(block, np.uint8)
    d, m = b[:4].view(np.float16).astype(np.float32)
    qs = b[4:20]
    q = np.concatenate([qs & 0x0F, qs >> 4]).astype(np.float32)
    return d * q + m


def q8_blocks(x):
    """(q, d, s) of one row's 8-bit activation blocks.
    Why: the scale maps the block's largest |x| to 127, so every quant fits int8 symmetric; numpy's
    rint rounds halves to even as the kernels' nearbyint does; s carries the block's sum so that a
    Q4_1 minimum's term m * sum(x) becomes m * s, one multiplication per block."""
    xb = np.asarray(x, np.float32).reshape(-1, 32)
    d = (np.abs(xb).max(axis=1) / np.float32(127)).astype(np.float32)
    safe = np.where(d == 0, np.float32(1), d)
    q = np.where(d[:, None] == 0, 0, np.clip(np.rint(xb / safe[:, None]), -127, 127)).astype(np.int8)
    s = (d * q.astype(np.int32).sum(axis=1).astype(np.float32)).astype(np.float32)
    return q.reshape(-1), d, s


def maddubs(u, s):
    """vpmaddubsw on one vector: u8 x s8, adjacent products summed, saturated to int16.
    Why: each product is at most 255 x 128 in size, so two need 17 bits; the instruction keeps 16
    and saturates, where a plain int16 cast would wrap."""
    p = np.asarray(u, np.uint8).astype(np.int32) * np.asarray(s, np.int8).astype(np.int32)
    return np.clip(p[0::2] + p[1::2], -32768, 32767).astype(np.int16)
