"""Chapter 11b exercises: one Q4_1 block decoded, one activation row quantised to 8-bit blocks,
one byte dot product instruction.

    q4_1_decode(block) -> the 32 float32 weights of one 20-byte Q4_1 block; against the `gguf`
        package's dequantisation, bit for bit, on the shipped model's blocks and random ones
    q8_blocks(x) -> (q int8 [K], d float32 [K/32], s float32 [K/32]): a row's 8-bit activation
        blocks as kernels/cpu/quant.h's quantize_q8 makes them; against the closed form
        d = max|x| / 127 (float32), q = round-half-even(x / d), s = d * sum(q) (0 for a zero block),
        which chapter 11b asserts equal to the kernels' bits
    maddubs(u, s) -> int16 [n]: vpmaddubsw on u uint8 [2n] and s int8 [2n]; against the closed
        form clip(u[2i] s[2i] + u[2i+1] s[2i+1], -32768, 32767) in int64 (Intel's Intrinsics
        Guide, _mm256_maddubs_epi16), which chapter 11b asserts equal to the instruction's bits
"""
from __future__ import annotations

import numpy as np

from llamanb.course.exercises.check import Case, Exercise


def _gguf_q4_1(block: np.ndarray) -> np.ndarray:
    import gguf

    return np.asarray(gguf.quants.dequantize(np.asarray(block, np.uint8).reshape(1, 20),
                                             gguf.GGMLQuantizationType.Q4_1),
                      dtype=np.float32).reshape(32)


def _q4_1_cases() -> list[Case]:
    from llamanb.io.gguf import tensor_index
    from llamanb.io.store import default_model_path

    blocks = []
    try:                                      # real blocks: the first of a few shipped tensors
        path = default_model_path()
        ix = tensor_index(path)
        for name in ("blk.0.attn_q.weight", "blk.7.ffn_down.weight", "blk.29.attn_v.weight"):
            qtype, _, off, _ = ix[name]
            if qtype == "Q4_1":
                with open(path, "rb") as f:
                    f.seek(off)
                    blocks.append((f"first block of {name}", np.frombuffer(f.read(20), np.uint8)))
    except Exception:                         # no embedded model here: random blocks only
        pass
    rng = np.random.default_rng(11)
    for i in range(6):
        b = rng.integers(0, 256, 20, dtype=np.uint8)
        dm = (rng.standard_normal(2) * 2.0 ** rng.integers(-20, 2, 2)).astype(np.float16)
        b[:4] = dm.view(np.uint8)
        blocks.append((f"random block {i + 1} (d={float(dm[0]):.3g}, m={float(dm[1]):.3g})", b))
    return [Case(label, (b.copy(),), _gguf_q4_1(b)) for label, b in blocks]


q4_1_decode = Exercise(
    "11b.1", "q4_1_decode", _q4_1_cases, rtol=0, atol=0,
    hint="bytes 0-1 are d and 2-3 are m (float16, little-endian: .view(np.float16)); byte 4 + j "
         "holds weight j in its low nibble and weight j + 16 in its high one; w = d * q + m in "
         "float32")


def _q8(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    xb = np.asarray(x, np.float32).reshape(-1, 32)
    d = (np.abs(xb).max(-1) / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(d[:, None] != 0, np.rint(xb / d[:, None]), 0)
    q = np.clip(t, -127, 127).astype(np.int8)
    s = (d * q.astype(np.int32).sum(-1).astype(np.float32)).astype(np.float32)
    return q.reshape(-1), d, s


def _q8_cases() -> list[Case]:
    rng = np.random.default_rng(112)
    rows = [("one block of standard normals", rng.standard_normal(32).astype(np.float32)),
            ("three blocks of very different sizes",
             (rng.standard_normal(96) * np.repeat([1e-3, 1.0, 300.0], 32)).astype(np.float32))]
    ties = np.zeros(32, np.float32)
    ties[:8] = [127, 0.5, 1.5, 2.5, -0.5, -2.5, 3.5, -126.5]     # d = 1: x / d lands on halves
    rows.append(("halves: d = 1, x / d = 0.5, 1.5, 2.5, -0.5, -2.5, ...", ties))
    zero = np.concatenate([np.zeros(32, np.float32), rng.standard_normal(32).astype(np.float32)])
    rows.append(("a block of zeros, then a block of normals", zero))
    rows.append(("one large value among small ones",
                 np.concatenate([[1e4], rng.standard_normal(31)]).astype(np.float32)))
    return [Case(label, (x.copy(),), _q8(x)) for label, x in rows]


q8_blocks = Exercise(
    "11b.2", "q8_blocks", _q8_cases, rtol=0, atol=0,
    hint="per block of 32: d = max|x| / 127 in float32; q = np.rint(x / d) (halves to even, as "
         "nearbyint), clipped to [-127, 127], 0 where d is 0; s = d * (the block's integer sum of "
         "q) in float32; return (q as int8 [K], d [K/32], s [K/32])")



def _maddubs_cases() -> list[Case]:
    rng = np.random.default_rng(113)

    def case(label, u, s):
        u, s = np.asarray(u, np.uint8), np.asarray(s, np.int8)
        pair = u.astype(np.int64) * s.astype(np.int64)
        expected = np.clip(pair[0::2] + pair[1::2], -32768, 32767).astype(np.int16)
        return Case(label, (u.copy(), s.copy()), expected)

    return [case("Q4_1's range: u in 0..15, s in -127..127",
                 rng.integers(0, 16, 32), rng.integers(-127, 128, 32)),
            case("full bytes: u in 0..255, s in -128..127",
                 rng.integers(0, 256, 64), rng.integers(-128, 128, 64)),
            case("u = 255, s = 127 and -128 (saturates both ways)",
                 [255, 255, 255, 255, 200, 100], [127, 127, -128, -128, 127, 127]),
            case("u = 200, s = -1 (u is unsigned)", [200, 0, 128, 128], [-1, 0, 1, -1])]


maddubs = Exercise(
    "11b.3", "maddubs", _maddubs_cases, rtol=0, atol=0,
    hint="widen before multiplying (u as unsigned, s as signed, both to int32); add products 2i "
         "and 2i + 1; clip to [-32768, 32767] before the cast to int16 (it saturates, not wraps)")

EXERCISES = (q4_1_decode, q8_blocks, maddubs)
