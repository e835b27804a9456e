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


# --- Tenstorrent block floats: bfloat8_b and bfloat4_b ----------------------------------------------
#
# ttnn stores a TILE_LAYOUT tensor as 32x32 tiles of four 16x16 faces. A block float keeps one
# 8-bit exponent per 16 values of a face row and, per value, a sign and a magnitude of 7 bits
# (bfloat8_b) or 3 bits (bfloat4_b) that already include the leading one. A face row is 16
# consecutive values of one matrix row, starting at a column that is a multiple of 16, so in
# row-major terms the blocks are simply x[..., 16 j : 16 j + 16].
#
# Conversion of one block (tt_metal's host conversion, checked bit for bit against ttnn 0.81.1):
#   shared  = the largest biased float32 exponent in the block (subnormal inputs count as zero)
#   q       = round_half_even(|x| / 2**(shared - 127 - (W - 1)))   from the exact float32 value
#   q       = min(q, 2**W - 1)                                      saturate instead of overflowing
#   value   = sign * q * 2**(shared - 127 - (W - 1));  q == 0 gives +0.0 (the sign is dropped)
# with W = 7 (bfloat8_b) or 3 (bfloat4_b). A value 2**(W-1) times smaller than the block's largest
# keeps no bits at all: a block float is as precise as the block's largest member allows.

BLOCK_FLOAT_BITS = {"bfloat8_b": 7, "bfloat4_b": 3}      # magnitude bits per value (sign extra)
BLOCK = 16                                                # values per shared exponent
TILE = 32


def _check_tiles(x: np.ndarray, fmt: str) -> np.ndarray:
    from llamanb.errors import LlamanbError

    if fmt not in BLOCK_FLOAT_BITS:
        raise LlamanbError(f"unknown block-float format {fmt!r}; use {' or '.join(BLOCK_FLOAT_BITS)}")
    x = np.ascontiguousarray(x, dtype=np.float32)
    if x.ndim < 2 or x.shape[-1] % TILE or x.shape[-2] % TILE:
        raise LlamanbError(f"{fmt} needs the last two dimensions to be multiples of {TILE} "
                           f"(tile layout), got shape {x.shape}")
    if not np.isfinite(x).all():
        raise LlamanbError(f"{fmt}: input holds inf or nan")
    return x


def blockfloat_encode(x: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 x [..., M, N] -> (exponents uint8 [..., M, N/16], signs bool [..., M, N],
    magnitudes uint8 [..., M, N]) of the block-float format `fmt` (row-major blocks)."""
    x = _check_tiles(x, fmt)
    W = BLOCK_FLOAT_BITS[fmt]
    bits = x.view(np.uint32).astype(np.int64)
    exp = (bits >> 23) & 0xFF
    mant = np.where(exp == 0, 0, (bits & 0x7FFFFF) | (1 << 23))       # subnormals flush to zero
    shared = exp.reshape(*exp.shape[:-1], -1, BLOCK).max(axis=-1)     # [..., M, N/16]
    shift = np.repeat(shared, BLOCK, axis=-1) - exp + (24 - W)         # >= 24 - W > 0
    shift = np.minimum(shift, 40)                                      # beyond 25: rounds to 0
    q = mant >> shift
    rest = mant - (q << shift)
    half = np.int64(1) << (shift - 1)
    q += (rest > half) | ((rest == half) & (q & 1 == 1))               # round half to even
    q = np.minimum(q, (1 << W) - 1)                                    # saturate
    sign = (bits >> 31 == 1) & (q != 0)
    return shared.astype(np.uint8), sign, q.astype(np.uint8)


def blockfloat_decode(shared: np.ndarray, sign: np.ndarray, mag: np.ndarray, fmt: str) -> np.ndarray:
    """The float32 values of a block-float encoding (exact: every value fits float32)."""
    W = BLOCK_FLOAT_BITS[fmt]
    scale = np.exp2(np.repeat(shared.astype(np.float64), BLOCK, axis=-1) - 127 - (W - 1))
    val = mag.astype(np.float64) * scale
    return np.where(sign, -val, val).astype(np.float32)


def blockfloat(x: np.ndarray, fmt: str) -> np.ndarray:
    """x rounded to the block-float format `fmt` ("bfloat8_b" or "bfloat4_b"), as float32."""
    return blockfloat_decode(*blockfloat_encode(x, fmt), fmt)


def bfloat8_b(x: np.ndarray) -> np.ndarray:
    """What ttnn holds after converting float32 x [..., M, N] (M, N multiples of 32) to bfloat8_b."""
    return blockfloat(x, "bfloat8_b")


def bfloat4_b(x: np.ndarray) -> np.ndarray:
    """What ttnn holds after converting float32 x [..., M, N] (M, N multiples of 32) to bfloat4_b."""
    return blockfloat(x, "bfloat4_b")


def blockfloat_pack(x: np.ndarray, fmt: str) -> np.ndarray:
    """Packed storage, tile by tile as ttnn lays it out: per 32x32 tile, the 64 shared exponents
    (face by face, one per face row) then the 1024 codes (sign bit + magnitude), one byte each for
    bfloat8_b and two per byte for bfloat4_b. Returns uint8 [..., tiles, bytes_per_tile]."""
    shared, sign, mag = blockfloat_encode(x, fmt)
    W = BLOCK_FLOAT_BITS[fmt]
    code = (sign.astype(np.uint8) << W) | mag                          # [..., M, N]
    lead, (M, N) = code.shape[:-2], code.shape[-2:]
    # [.., M/32, 2 (face row), 16, N/32, 2 (face col), 16] -> tiles, faces, rows, columns
    faces = code.reshape(*lead, M // 32, 2, 16, N // 32, 2, 16)
    n = len(lead)
    order = tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2, n + 5)
    faces = faces.transpose(order).reshape(*lead, (M // 32) * (N // 32), 1024)
    ex = shared.reshape(*lead, M // 32, 2, 16, N // 32, 2)             # one per face row
    ex = ex.transpose(tuple(range(n)) + (n, n + 3, n + 1, n + 4, n + 2)).reshape(
        *lead, (M // 32) * (N // 32), 64)
    if W == 3:                                                         # two 4-bit codes per byte
        faces = faces[..., 0::2] | (faces[..., 1::2] << 4)
    return np.concatenate([ex, faces], axis=-1)


def blockfloat_tile_bytes(fmt: str) -> int:
    """Bytes one 32x32 tile takes in `fmt`: 64 exponents + 1024 codes of (1 + W) bits."""
    return 64 + 1024 * (1 + BLOCK_FLOAT_BITS[fmt]) // 8


def blockfloat_padded(x: np.ndarray, fmt: str) -> np.ndarray:
    """x [..., M, N] of any M, N rounded to `fmt` as ttnn stores it in tile layout: padded with
    zeros to whole 32x32 tiles, converted, cropped. A zero never raises a block's shared exponent,
    so the padding cannot change a real value; blocks still start at multiples of 16 columns."""
    x = np.asarray(x, dtype=np.float32)
    flat = x.reshape(-1, x.shape[-1]) if x.ndim != 2 else x
    M, N = flat.shape
    padded = np.zeros((-(-M // TILE) * TILE, -(-N // TILE) * TILE), np.float32)
    padded[:M, :N] = flat
    return blockfloat(padded, fmt)[:M, :N].reshape(x.shape)


# --- float32 rounding bounds ------------------------------------------------------------------------
#
# Two float32 computations of the same sum that add in different orders (one BLAS kernel against
# another, a GEMV against a GEMM row, AVX2 against AVX-512) differ by rounding alone. The classical
# bound holds for every order: a dot product of length K computed in floating point is within
# gamma_K * sum|a_i b_i| of the exact one, gamma_K = K u / (1 - K u) (Higham, "Accuracy and
# Stability of Numerical Algorithms", 2nd ed., eq. 3.5 and Lemma 3.1). Tolerances built from it
# are proved for any CPU, not tuned to the one a test happened to run on.

U_FLOAT32 = 2.0 ** -24          # unit roundoff of float32 (round to nearest)


def gamma(k: int, u: float = U_FLOAT32) -> float:
    """gamma_k = k u / (1 - k u): the relative error bound of k float operations in sequence."""
    if k * u >= 1:
        raise ValueError(f"gamma_{k} is unbounded at u = {u}")
    return k * u / (1 - k * u)


def matmul_bound(a: np.ndarray, b: np.ndarray, u: float = U_FLOAT32) -> np.ndarray:
    """Elementwise bound on |fl(a @ b) - a @ b| for any summation order: gamma_K (|a| @ |b|),
    K = a.shape[-1], evaluated in float64."""
    a64, b64 = np.abs(np.asarray(a, np.float64)), np.abs(np.asarray(b, np.float64))
    return gamma(a.shape[-1], u) * (a64 @ b64)
