"""The cpu backend's quantised products with 8-bit activations (kernels/cpu/quant.h's
quantize_q8 and IDot): the activation blocks against a numpy re-derivation bit for bit, the
products against float64 within the bound derived below, a row's bits independent of the other
rows of its step, and the option that picks the path.

The bound. For one output y = y0 + sum_k w_k x_k, with w* = d q + m the block's exact weight
(W = fl(w*), the gguf package's float32 dequantisation, |W - w*| <= u |w*|), the kernel computes,
per block b of 32 k, with the activation block's scale da, quants qa and xh_k = da qa_k:
    P1_b = (d da) isum_b,  isum_b = sum_k q_k qa_k        (exact in int32)
    P2_b = m sa_b,  sa_b = fl(da sum_k qa_k)              (Q4_1; Q4_0, Q5_0: m = -8 d, -16 d)
and sums acc = fma(isum, fl(d da), acc), acc = fma(m, sa, acc) over the blocks, then y0 + acc.
  * activations: x / da rounds once (relative u), then to the nearest integer (absolute 1/2):
        |x_k - xh_k| <= da / 2 + u |x_k|                  (da a normal float32; no clipping
                                                           happens: |x / da| <= 127 (1 + u))
  * arithmetic: each of the 2 nb terms carries one rounding (fl(d da) or fl(da sum qa)) and each
    of the 2 nb + 1 additions one more, so with gamma_n = n u / (1 - n u):
        |fl - exact| <= gamma_{2 nb + 2} (sum_k (|d q_k| + |m|) |xh_k| + |y0|)
So |y - (y0 + sum_k W_k x_k)| <=
        sum_k |w*_k| (da_k / 2 + u |x_k|) + u sum_k |w*_k| |x_k|
      + gamma_{2 nb + 2} (sum_k (|d q_k| + |m|) |xh_k| + |y0|),      |w*| <= |W| / (1 - u).
"""
from __future__ import annotations

import numpy as np
import pytest

from llamanb.errors import LlamanbError
from llamanb.model.numerics import U_FLOAT32, gamma

U = U_FLOAT32
QTYPES = ("Q4_1", "Q4_0", "Q5_0", "Q4_K", "Q6_K", "Q8_0")


def _gguf_block(qtype: str) -> tuple[int, int]:
    """(weights, bytes) of one block, as the gguf package states them (GGML_QUANT_SIZES)."""
    import gguf

    return gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[qtype]]


def _k(qtype: str, k: int) -> int:
    """The smallest multiple of the format's block (32, or Q4_K's super-block of 256) >= k."""
    size = _gguf_block(qtype)[0]
    return -(-k // size) * size


def _numpy_q8(x: np.ndarray):
    """The 8-bit activation blocks as the kernel's contract states them, in numpy (float32
    arithmetic: numpy's float32 division is IEEE's, np.rint rounds half to even)."""
    M, K = x.shape
    xb = x.reshape(M, K // 32, 32).astype(np.float32)
    amax = np.abs(xb).max(axis=-1)
    d = (amax / np.float32(127)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.rint(xb / d[..., None])
    q = np.where(d[..., None] == 0, 0, np.clip(q, -127, 127)).astype(np.int8)
    s = (d * q.astype(np.int32).sum(-1).astype(np.float32)).astype(np.float32)
    return q.reshape(M, K), d, s


def _blocks(qtype: str, n: int, nb: int, seed: int) -> np.ndarray:
    """GGUF rows of random blocks (nb x 32 weights) with scales of a trained model's size (normal
    float16; Q4_K: d and dmin, its 6-bit sub-block scales and minimums uniform)."""
    rng = np.random.default_rng(seed)
    size, per = _gguf_block(qtype)
    nb = nb * 32 // size
    b = rng.integers(0, 256, (n, nb, per), dtype=np.uint8)
    sc = (rng.standard_normal((n, nb, 2)) * 2.0 ** rng.integers(-8, -2, (n, nb, 2)))
    if qtype == "Q6_K":                                          # d is the last 2 bytes
        b[..., -2:] = sc[..., :1].astype(np.float16).view(np.uint8).reshape(n, nb, 2)
        return b.reshape(n, -1)
    b[..., :4] = sc.astype(np.float16).view(np.uint8).reshape(n, nb, 4)
    if qtype in ("Q4_0", "Q5_0", "Q8_0"):                        # one scale, then quants
        b[..., 2:4] = rng.integers(0, 256, (n, nb, 2), dtype=np.uint8)
    return b.reshape(n, -1)


def _parts(raw: np.ndarray, qtype: str):
    """|d q| and |m| per weight [N, K], float64, from the GGUF blocks' own fields (q the stored
    quant, 0..15 for the 4-bit formats, 0..31 for Q5_0; Q4_0's m is -8 d, Q5_0's -16 d; Q4_K's d
    and m are a sub-block's d sc and -dmin m, its 6-bit fields unpacked by the gguf package;
    Q6_K: d sc (q - 32), no m)."""
    import gguf

    N = raw.shape[0]
    if qtype == "Q6_K":                 # no minimum: |d q| is the weight's magnitude, exactly
        W = gguf.quants.dequantize(raw, gguf.GGMLQuantizationType.Q6_K).reshape(N, -1)
        return np.abs(W.astype(np.float64)), np.zeros(W.shape)
    b = raw.reshape(N, -1, _gguf_block(qtype)[1])
    d = b[..., 0:2].copy().view(np.float16)[..., 0].astype(np.float64)          # [N, nb]
    if qtype == "Q4_K":
        dmin = b[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64)
        sc, mn = gguf.quants.Q4_K.get_scale_min(b[..., 4:16].reshape(-1, 12))
        D = d[..., None] * sc.reshape(N, -1, 8)                                 # [N, S, 8]
        M = dmin[..., None] * mn.reshape(N, -1, 8)
        qs = b[..., 16:].reshape(N, -1, 4, 1, 32) >> np.array([0, 4], np.uint8).reshape(2, 1)
        q = (qs & 15).reshape(N, -1, 8, 32).astype(np.float64)
        return (np.abs(D[..., None] * q).reshape(N, -1),
                np.repeat(np.abs(M).reshape(N, -1), 32, axis=1))
    if qtype in ("Q4_1", "Q4_0"):
        h = 4 if qtype == "Q4_1" else 2
        m = b[..., 2:4].copy().view(np.float16)[..., 0].astype(np.float64) if h == 4 else -8 * d
        q = np.concatenate([b[..., h:] & 15, b[..., h:] >> 4], axis=-1).astype(np.float64)
    elif qtype == "Q5_0":               # the fifth bit of weight i: bit i of the uint32 at 2..6
        m = -16 * d
        hb = (b[..., 2:6].copy().view("<u4") >> np.arange(32, dtype=np.uint32)) & 1
        q = (np.concatenate([b[..., 6:] & 15, b[..., 6:] >> 4], axis=-1) + (hb << 4)).astype(np.float64)
    else:
        m = np.zeros_like(d)
        q = b[..., 2:].view(np.int8).astype(np.float64)
    dq = np.abs(d[..., None] * q).reshape(N, -1)
    return dq, np.repeat(np.abs(m), 32, axis=1)


def test_activation_blocks_are_the_numpy_derivation(kernel_builds):
    """quantize_q8 (both builds) = the numpy statement of its contract, bit for bit: a zero block
    (scale 0, quants 0), ties (x / d = k + 1/2), a block whose max is negative, a NaN block."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 128)).astype(np.float32) * 3
    x[0, :32] = 0.0
    x[1, 32:64] = np.arange(32, dtype=np.float32) - 15.5         # halves: round to even
    x[1, 63] = 127.0                                              # d = 1, x / d = k + 1/2 exactly
    x[2, 64:96] *= -1
    x[2, 70] = -50.0                                              # max |x| from a negative value
    for k in kernel_builds:
        q, d, s = k.quantize_q8(x)
        qn, dn, sn = _numpy_q8(x)
        assert np.array_equal(q, qn) and np.array_equal(d.view(np.uint32), dn.view(np.uint32))
        assert np.array_equal(s.view(np.uint32), sn.view(np.uint32)), k.flavour
        assert d[0, 0] == 0 and not q[0, :32].any()
        assert q[1, 32] == -16 and q[1, 33] == -14            # -15.5 -> -16, -14.5 -> -14 (even)
        assert q[2, 70] == -127 and np.abs(q).max() == 127
        y = x.copy()
        y[3, 5] = np.nan
        q, d, s = k.quantize_q8(y)
        assert np.isnan(d[3, 0]) and np.isnan(s[3, 0]) and not np.isnan(d[3, 1:]).any()


@pytest.mark.parametrize("qtype", QTYPES)
def test_int8_products_within_the_derived_bound(kernel_builds, qtype):
    """Both builds, decode and prefill row counts, a short last panel (N = 45): within the
    bound of the module doc of float64, and visibly not the float path (the activations'
    rounding shows: some error exceeds the float32 summation bound)."""
    import gguf

    K, N = _k(qtype, 224), 45
    nb = K // 32
    raw = _blocks(qtype, N, nb, seed=21)
    W = np.asarray(gguf.quants.dequantize(raw, gguf.GGMLQuantizationType[qtype]),
                   np.float64).reshape(N, K)                    # the gguf package's float32
    dq, m = _parts(raw, qtype)
    rng = np.random.default_rng(8)
    for k in kernel_builds:
        wq = k.pack_quant(raw, qtype, K)
        beyond_float = False
        for M in (1, 3, 8, 19, 70):
            x = rng.standard_normal((M, K)).astype(np.float32)
            y0 = rng.standard_normal((M, N)).astype(np.float32)
            y = k.matmul(x, wq, y0.copy(), accumulate=True, act8=True)
            _, d, _ = k.quantize_q8(x)
            da = np.repeat(d.astype(np.float64), 32, axis=1)             # [M, K]
            ax = np.abs(x).astype(np.float64)
            aw = np.abs(W) / (1 - U)                                     # >= |w*|
            xh = ax + da / 2 + U * ax                                    # >= |xh|
            bound = ((da / 2 + U * ax) @ aw.T + U * ax @ aw.T
                     + gamma(2 * nb + 2) * (xh @ (dq + m).T + np.abs(y0)))
            exact = y0 + x.astype(np.float64) @ W.T
            err = np.abs(y - exact)
            assert (err <= bound).all(), (k.flavour, M, (err / bound).max())
            beyond_float |= bool((err > gamma(K + 1) * (ax @ np.abs(W).T + np.abs(y0))).any())
            print(f"{k.flavour} {qtype} M={M}: error / bound at most {(err / bound).max():.2f}")
        assert beyond_float, k.flavour


@pytest.mark.parametrize("qtype", QTYPES)
def test_int8_row_bits_do_not_depend_on_the_step(kernels, qtype):
    """A row's result is the same bits alone, in a decode step of 8 and in a prefill block of 70:
    what batching's token-identity rests on."""
    K, N = _k(qtype, 160), 70
    raw = _blocks(qtype, N, K // 32, seed=5)
    wq = kernels.pack_quant(raw, qtype, K)
    x = np.random.default_rng(2).standard_normal((70, K)).astype(np.float32)
    full = kernels.matmul(x, wq, np.zeros((70, N), np.float32), act8=True)
    for M in (1, 3, 8):
        part = kernels.matmul(x[:M].copy(), wq, np.zeros((M, N), np.float32), act8=True)
        assert np.array_equal(part, full[:M]), M
    one = kernels.matmul(x[37:38].copy(), wq, np.zeros((1, N), np.float32), act8=True)
    assert np.array_equal(one, full[37:38])


def test_activations_option_and_variable(monkeypatch):
    from llamanb.cpu.backend import ACTIVATIONS_VAR, default_activations

    monkeypatch.delenv(ACTIVATIONS_VAR, raising=False)
    assert default_activations() == "int8"
    monkeypatch.setenv(ACTIVATIONS_VAR, "float32")
    assert default_activations() == "float32"
    monkeypatch.setenv(ACTIVATIONS_VAR, "int4")
    with pytest.raises(LlamanbError, match="int8 or float32") as e:
        default_activations()
    assert "\n" not in str(e.value)


def test_q4_1_engine_default_is_int8_and_close_to_float(smollm, kernels):
    """The q4_1 engine takes 8-bit activations by default (its description says so); on the chat
    prompt its first choice and the float-activation engine's are each in the other's top 5 (the
    reference gate's rule; `verify` holds it over every case: test_cpu_backend.py); float32
    activations stay one option away."""
    from llamanb.engine.engine import Engine

    e8 = Engine(smollm, "cpu", dtype="q4_1")
    ef = Engine(smollm, "cpu", dtype="q4_1", activations="float32")
    assert e8.backend.act8 and "8-bit activations" in e8.backend.description
    assert not ef.backend.act8 and "float32 activations" in ef.backend.description
    ids = smollm.tokenizer.encode_prompt("What is the capital of France?", chat=True)
    rows = []
    for e in (e8, ef):
        cache = e.new_cache(64)
        rows.append(e.prefill(ids, cache))
    top5 = [set(np.argsort(r.reshape(-1))[-5:].tolist()) for r in rows]
    assert int(np.argmax(rows[0])) in top5[1] and int(np.argmax(rows[1])) in top5[0]
    assert not np.array_equal(rows[0], rows[1])                  # a different computation
    with pytest.raises(LlamanbError, match="activations"):
        Engine(smollm, "cpu", dtype="q4_1", activations="int4")


def _pmaddubsw_pmaddwd(u: np.ndarray, s: np.ndarray) -> np.ndarray:
    """vpmaddubsw then vpmaddwd against ones, as Intel's SDM states them (PMADDUBSW: adjacent
    u8 * s8 products added "with signed saturation" to int16; PMADDWD: the two words of a
    doubleword multiplied by 1 and added exactly), in int64."""
    p = u.astype(np.int64) * s.astype(np.int64)
    pairs = np.clip(p[0::2] + p[1::2], -32768, 32767)
    return pairs[0::2] + pairs[1::2]


def _dot4_reference(u: np.ndarray, s: np.ndarray) -> np.ndarray:
    """sum_t u[4j + t] s[4j + t] in int64: vpdpbusd's result (SDM VPDPBUSD: no saturation)."""
    return (u.astype(np.int64) * s.astype(np.int64)).reshape(-1, 4).sum(axis=1)


def test_byte_dots_agree_wherever_vpmaddubsw_cannot_saturate(kernel_builds):
    """Every build's byte-dot step (quant.h's dot4: vpdpbusd, vpmaddubsw + vpmaddwd, or int32
    lanes) is the exact int64 sum on the operands the q8 products give it -- the unsigned
    operand 0..15 (Q4_1, Q4_0, Q4_K nibbles; a pair at most 2 * 15 * 127 = 3810), 0..31 (Q5_0:
    7874), 0..128 (|q| of Q8_0 and Q6_K, with the activation's sign: 2 * 128 * 127 = 32512),
    activations -127..127 (quantize_q8 never makes -128) -- including each range's extremes; so
    vpdpbusd and vpmaddubsw builds agree bit for bit there."""
    rng = np.random.default_rng(45)
    for top in (15, 31, 128):
        u = rng.integers(0, top + 1, 4096).astype(np.uint8)
        s = rng.integers(-127, 128, 4096).astype(np.int8)
        u[:64], s[:64] = top, np.tile(np.array([127, 127, -127, -127], np.int8), 16)   # extremes
        ref = _dot4_reference(u, s)
        assert np.array_equal(_pmaddubsw_pmaddwd(u, s), ref), top         # no pair saturates
        for k in kernel_builds:
            assert np.array_equal(k.dot4(u, s), ref), (k.flavour, k.int_dot, top)


def test_vpmaddubsw_saturates_where_vpdpbusd_does_not(kernel_builds):
    """Bytes 255 times activations 127: each pair is 2 * 255 * 127 = 64770 > 32767, so
    vpmaddubsw clips it to 32767 (a lane 65534), while vpdpbusd sums the four products in 32 bits
    (129540, the int64 sum). The builds here show both where they have them (vpdpbusd: emulated
    through SIMDe on a CPU without VNNI); the q8 products never hand either such bytes."""
    u = np.full(256, 255, np.uint8)
    s = np.full(256, 127, np.int8)
    s[128:] = -128                                   # and the negative end: -65280 -> -32768
    ref = _dot4_reference(u, s)
    sat = _pmaddubsw_pmaddwd(u, s)
    assert ref[0] == 129540 and sat[0] == 65534 and ref[-1] == -130560 and sat[-1] == -65536
    kinds = set()
    for k in kernel_builds:
        got = k.dot4(u, s)
        kinds.add(k.int_dot)
        want = sat if k.int_dot == "vpmaddubsw" else ref
        assert np.array_equal(got, want), (k.flavour, k.int_dot)
    assert {"vpmaddubsw", "vpdpbusd"} <= kinds or len(kernel_builds) < 3, kinds


@pytest.mark.parametrize("qtype", QTYPES)
def test_int8_products_same_bits_in_every_fma_build(kernel_builds, qtype):
    """The q8 products of the builds that fuse multiply-adds (native, and the vpdpbusd builds:
    emulated AVX-512, emulated 256-bit VNNI) are the same bits, decode and prefill row counts:
    the integer block sums are exact whichever instruction makes them (the two tests above), and
    the float folds are the same FMA chain. (The portable build has no FMA: its folds round
    twice, so it keeps only the derived bound.)"""
    K, N = _k(qtype, 256), 45
    raw = _blocks(qtype, N, K // 32, seed=9)
    x = np.random.default_rng(4).standard_normal((19, K)).astype(np.float32)
    builds = [k for k in kernel_builds if "FMA" in k.isa]
    ys = []
    for k in builds:
        wq = k.pack_quant(raw, qtype, K)
        ys.append([k.matmul(x[:M].copy(), wq, np.zeros((M, N), np.float32), act8=True)
                   for M in (1, 4, 19)])
    for k, y in zip(builds[1:], ys[1:]):
        for a, b in zip(ys[0], y):
            assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), (k.flavour, k.int_dot)


def test_q4_1_engine_same_bits_through_the_256_bit_vpdpbusd(smollm, kernels, vnni256_kernels):
    """The whole Q4_1 engine on the AVX2 build whose byte dot products are the 256-bit vpdpbusd
    (emulated through SIMDe where this CPU has no VNNI) gives the native AVX2 build's logits bit
    for bit: a prompt, then two greedy decode steps. Its description says it is emulated."""
    from llamanb.cpu import kernels as cpu_kernels
    from llamanb.engine.engine import Engine

    if vnni256_kernels is None:
        pytest.skip("the native build takes vpdpbusd itself, or is AVX-512 (its own test)")
    ids = smollm.tokenizer.encode_prompt("What is the capital of France?", chat=True)
    runs = []
    for march in ("native", cpu_kernels.EMULATED_VNNI256):
        e = Engine(smollm, "cpu", dtype="q4_1", march=march)
        assert e.backend.act8 and e.backend.k.int_dot == ("vpmaddubsw" if march == "native"
                                                          else "vpdpbusd")
        cache = e.new_cache(len(ids) + 4)
        logits = [e.prefill(ids, cache)]
        for _ in range(2):
            logits.append(e.decode(int(np.argmax(logits[-1])), cache))
        runs.append(logits)
    assert "vpdpbusd EMULATED through SIMDe" in e.backend.description
    for i, (a, b) in enumerate(zip(*runs)):
        assert np.array_equal(a, b), (i, float(np.abs(a - b).max()))
