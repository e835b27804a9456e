"""The probes of the 8-bit path on one block (kernels/cpu/quant_probe.cc, chapter 11b), on every
build this machine runs (native, portable, the AVX-512 paths): quant.h's IDot<q4_1_t> on one
Q4_1 panel block against the plain integer dot product of the GGUF's quants, and its dot_u8s8
(vpmaddubsw) against the instruction's definition in Intel's Intrinsics Guide
(_mm256_maddubs_epi16: u8 x s8, adjacent products added, saturated to int16)."""
from __future__ import annotations

import numpy as np
import pytest


def _q4_1_blocks(rng, n: int, quants=None) -> np.ndarray:
    """n GGUF Q4_1 blocks of 32 weights (20 bytes each: float16 d, m, 16 bytes of nibbles)."""
    b = np.zeros((n, 20), np.uint8)
    b[:, :4] = (rng.standard_normal((n, 2)) * 0.05).astype(np.float16).view(np.uint8)
    q = rng.integers(0, 16, (n, 32)) if quants is None else np.broadcast_to(quants, (n, 32))
    b[:, 4:] = (q[:, :16] | (q[:, 16:] << 4)).astype(np.uint8)       # j low, j + 16 high
    return b


def test_q4_1_block_isum_is_the_integer_dot_product(kernel_builds):
    rng = np.random.default_rng(45)
    for k in kernel_builds:
        for n, quants, qa in (
                (k.panel_width, None, rng.integers(-127, 128, 32)),
                (5, None, rng.integers(-127, 128, 32)),                  # a panel's tail: zeros
                (k.panel_width, 15, np.full(32, 127)),                   # the largest sums
                (k.panel_width, 15, np.full(32, -127))):
            blocks = _q4_1_blocks(rng, n, quants)
            panel = k.pack_quant(blocks, "Q4_1", 32).data.reshape(-1)
            got = k.q4_1_block_isum(panel, np.asarray(qa, np.int8))
            q = np.concatenate([blocks[:, 4:] & 15, blocks[:, 4:] >> 4], axis=1).astype(np.int64)
            want = np.zeros(k.panel_width, np.int64)
            want[:n] = q @ np.asarray(qa, np.int64)
            assert np.array_equal(got, want), (k.flavour, n, quants)
        assert 32 * 15 * 127 in k.q4_1_block_isum(                      # 60960: past int16,
            k.pack_quant(_q4_1_blocks(rng, 1, 15), "Q4_1", 32).data.reshape(-1),  # summed in 32
            np.full(32, 127, np.int8))


def test_dot_u8s8_is_vpmaddubsw_and_saturates(kernel_builds):
    rng = np.random.default_rng(46)
    ran = []
    for k in kernel_builds:
        n = 4 * k.vector_width
        cases = [(rng.integers(0, 256, n), rng.integers(-128, 128, n)),
                 (np.full(n, 255), np.tile([127, 127, -128, -128], n // 4)),
                 (np.tile([200, 0, 128, 128], n // 4), np.tile([-1, 0, 1, -1], n // 4))]
        for u, s in cases:
            got = k.dot_u8s8(np.asarray(u, np.uint8), np.asarray(s, np.int8))
            if got is None:                            # no byte dot product in this build
                assert not k.int_dot_bytes
                break
            pair = np.asarray(u, np.int64) * np.asarray(s, np.int64)
            want = np.clip(pair[0::2] + pair[1::2], -32768, 32767)
            assert np.array_equal(got, want), k.flavour
        else:
            ran.append(k.flavour)
            assert k.int_dot_bytes
    if not ran:
        pytest.skip("no build here has a byte dot product (vpmaddubsw)")
    native = kernel_builds[0]
    sat = native.dot_u8s8(np.full(4 * native.vector_width, 255, np.uint8),
                          np.full(4 * native.vector_width, 127, np.int8))
    assert sat is None or (sat == 32767).all()          # 2 x 255 x 127 = 64770 saturates
