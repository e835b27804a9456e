"""Tenstorrent block floats (bfloat8_b, bfloat4_b) against ttnn's own host conversion.

The reference file holds what ttnn 0.81.1 returned for float32 inputs converted in TILE_LAYOUT;
case 6 starts with hand-made edge cases (ties, signed zero, subnormals, saturation, a zero block).
Every value must match bit for bit (compared as uint32, so -0.0 != +0.0)."""
import numpy as np
import pytest

from conftest import REFERENCE_DIR
from llamanb.model.config import BYTES_PER_PARAM
from llamanb.errors import LlamanbError
from llamanb.model.numerics import (bfloat4_b, bfloat8_b, blockfloat_pack, blockfloat_tile_bytes, to_bf16)

VECTORS = REFERENCE_DIR / "ttnn_blockfloat_vectors.npz"
needs_ref = pytest.mark.skipif(not VECTORS.exists(), reason="data/reference is incomplete")


def cases():
    z = np.load(VECTORS)
    n = len([k for k in z.files if k.startswith("in_")])
    return [(z[f"in_{i}"], z[f"bfp8_b_{i}"], z[f"bfp4_b_{i}"], z[f"bf16_{i}"]) for i in range(n)]


def bits(a):
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


@needs_ref
@pytest.mark.parametrize("i", range(8))
def test_bit_exact_against_ttnn(i):
    x, b8, b4, b16 = cases()[i]
    assert np.array_equal(bits(bfloat8_b(x)), bits(b8))
    assert np.array_equal(bits(bfloat4_b(x)), bits(b4))
    assert np.array_equal(bits(to_bf16(x)), bits(b16))


@needs_ref
def test_edge_cases_are_exercised():
    """The edge rows really contain what they claim (so the bit-exact test covers them)."""
    x, b8, _, _ = cases()[6]
    assert (x[:8] == 0).any() and (np.signbit(x[:8]) & (x[:8] == 0)).any()          # -0.0
    tiny = np.abs(x[:8]) < np.finfo(np.float32).tiny
    assert (tiny & (x[:8] != 0)).any()                                                   # subnormal
    assert (np.abs(b8[:8]) < np.abs(x[:8]) * 0.99).any()                                # saturation
    assert not np.signbit(b8[x == 0]).any()                                              # +0 out


def decode_packed(packed, fmt, shape):
    """An independent reader of the tile-packed bytes: exponents, then sign|magnitude codes."""
    W = 7 if fmt == "bfloat8_b" else 3
    M, N = shape
    ex, codes = packed[:, :64].astype(np.int64), packed[:, 64:]
    if W == 3:
        codes = np.stack([codes & 0xF, codes >> 4], axis=-1).reshape(codes.shape[0], 1024)
    mag = (codes & ((1 << W) - 1)).astype(np.float64)
    sign = np.where(codes >> W, -1.0, 1.0)
    out = np.zeros(shape)
    t = 0
    for tr in range(M // 32):
        for tc in range(N // 32):
            for f in range(4):
                fr, fc = divmod(f, 2)
                for r in range(16):
                    e = ex[t, f * 16 + r]
                    row = slice(f * 256 + r * 16, f * 256 + r * 16 + 16)
                    val = sign[t, row] * mag[t, row] * 2.0 ** (e - 127 - (W - 1))
                    out[tr * 32 + fr * 16 + r, tc * 32 + fc * 16:tc * 32 + fc * 16 + 16] = val
            t += 1
    return out.astype(np.float32)


@needs_ref
@pytest.mark.parametrize("fmt,ref", [("bfloat8_b", 1), ("bfloat4_b", 2)])
def test_packed_tiles_decode_to_ttnn_values(fmt, ref):
    x, *outs = cases()[0]
    packed = blockfloat_pack(x, fmt)
    tiles = (x.shape[0] // 32) * (x.shape[1] // 32)
    assert packed.shape == (tiles, blockfloat_tile_bytes(fmt)) and packed.dtype == np.uint8
    assert np.array_equal(decode_packed(packed, fmt, x.shape), outs[ref - 1])


def test_bytes_per_tile_closed_form():
    # 1024 values x (1 sign + 7 or 3 magnitude bits) / 8 + 64 shared exponents
    assert blockfloat_tile_bytes("bfloat8_b") == 1024 + 64
    assert blockfloat_tile_bytes("bfloat4_b") == 512 + 64
    x = np.random.default_rng(0).standard_normal((64, 96)).astype(np.float32)
    for fmt, key in (("bfloat8_b", "bfp8"), ("bfloat4_b", "bfp4")):
        assert blockfloat_pack(x, fmt).nbytes == x.size * BYTES_PER_PARAM[key]


def test_error_within_half_a_step():
    """Closed form: unsaturated values are off by at most half of the block's step."""
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((64, 64)) * np.exp2(rng.integers(-20, 20, (64, 4)).repeat(16, 1))
         ).astype(np.float32)
    for fmt, W in (("bfloat8_b", 7), ("bfloat4_b", 3)):
        q = bfloat8_b(x) if W == 7 else bfloat4_b(x)
        e = np.frexp(np.abs(x).reshape(64, 4, 16).max(-1).astype(np.float64))[1] - 1   # unbiased
        step = np.repeat(np.exp2(e - (W - 1)), 16, axis=-1)
        top = (2 ** W - 1) * step
        ok = np.abs(x) <= top
        assert (np.abs(q.astype(np.float64) - x)[ok] <= step[ok] / 2).all()
        assert np.array_equal(np.abs(q[~ok]), top[~ok].astype(np.float32))


@pytest.mark.parametrize("shape", [(31, 32), (32, 48), (32,)])
def test_non_tile_shapes_are_refused(shape):
    with pytest.raises(LlamanbError, match="multiples of 32"):
        bfloat8_b(np.zeros(shape, np.float32))


def test_nonfinite_refused():
    x = np.zeros((32, 32), np.float32)
    x[3, 4] = np.inf
    with pytest.raises(LlamanbError, match="inf or nan"):
        bfloat4_b(x)


@needs_ref
def test_padded_conversion_matches_ttnn_on_whole_blocks():
    """Any shape: zero padding to tiles never changes a complete 16-value block (rows 0..69 and
    the three blocks of columns 0..47 below equal ttnn's values for the full 96x96 array)."""
    from llamanb.model.numerics import blockfloat_padded

    x, b8, b4, _ = cases()[0]
    sub = x[:70, :50]
    assert np.array_equal(bits(blockfloat_padded(sub, "bfloat8_b")[:, :48]), bits(b8[:70, :48]))
    assert np.array_equal(bits(blockfloat_padded(sub, "bfloat4_b")[:, :48]), bits(b4[:70, :48]))
    assert blockfloat_padded(x[:3, :5, None].repeat(32, -1), "bfloat8_b").shape == (3, 5, 32)
