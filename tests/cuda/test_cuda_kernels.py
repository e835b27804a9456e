"""llamanb.cuda.kernels in numba-cuda's CUDA simulator (NUMBA_ENABLE_CUDASIM=1), each kernel against
float64 numpy at tiny shapes (the simulator runs every CUDA thread as a Python thread), with
error bounds derived beside each check; plus what the backends say without a GPU."""
from __future__ import annotations

import math
import numpy as np
import pytest

pytest.importorskip("numba_cuda", reason="numba-cuda not installed (pip install 'llamanb[cuda]')")

from llamanb.cuda import runtime  # noqa: E402

U = 2.0 ** -24                      # float32 unit roundoff


def gamma(n: int) -> float:
    """Higham's gamma_n = n u / (1 - n u): n roundings of relative size <= u compound to at most
    gamma_n; a sum of n products computed in float32 in any order is within gamma_n sum|terms|."""
    return n * U / (1 - n * U)


@pytest.fixture(scope="module")
def k():
    runtime.load(simulated=True)          # sets NUMBA_ENABLE_CUDASIM before numba's first import
    from llamanb.cuda import kernels
    from llamanb.cuda.backend import simulator_pace

    assert kernels.SIMULATED
    with simulator_pace(True):
        yield kernels.build(kernels.SIM_TILE)


def f64(a):
    return np.asarray(a, dtype=np.float64)


def test_gemm_nt_within_summation_bound(k):
    rng = np.random.default_rng(0)
    M, K, N, T = 3, 9, 6, k.tile                    # no dimension a multiple of the tile
    a = rng.standard_normal((M, K)).astype(np.float32)
    w = rng.standard_normal((N, K)).astype(np.float32)
    c = np.zeros((M, N), np.float32)
    k.gemm_nt[(-(-N // T), -(-M // T)), (T, T)](a, w, c, 0)
    exact, mag = f64(a) @ f64(w).T, np.abs(f64(a)) @ np.abs(f64(w)).T
    assert np.all(np.abs(c - exact) <= gamma(K) * mag)
    # accumulate: c + a w^T is one more addition: gamma_{K+1} (|c0| + sum|a w|)
    c0 = rng.standard_normal((M, N)).astype(np.float32)
    c = c0.copy()
    k.gemm_nt[(-(-N // T), -(-M // T)), (T, T)](a, w, c, 1)
    assert np.all(np.abs(c - (f64(c0) + exact)) <= gamma(K + 1) * (np.abs(f64(c0)) + mag))


def test_rmsnorm_one_warp_per_row(k):
    rng = np.random.default_rng(1)
    R, H, eps = 3, 40, 1e-5
    x = rng.standard_normal((R, H)).astype(np.float32)
    w = (rng.random(H) + 0.5).astype(np.float32)
    out = np.zeros_like(x)
    k.rmsnorm[-(-R // k.warps_per_block), 32 * k.warps_per_block](x, w, out, np.float32(eps))
    ex = f64(x) / np.sqrt((f64(x) ** 2).mean(-1, keepdims=True) + eps) * f64(w)
    # sum of squares: gamma_H relative; /H, +eps, sqrt (halves the relative error), 1/., x*inv,
    # *w: six more roundings -> relative error <= gamma_H / 2 + gamma_6 <= gamma_{H+6}
    assert np.all(np.abs(out - ex) <= gamma(H + 6) * np.abs(ex))


def test_rope_rotates_q_and_k_not_v(k):
    from llamanb.model.rope import apply_rope, cos_sin, rope_for
    from llamanb.model.config import LlamaConfig

    rng = np.random.default_rng(2)
    R, Nh, Nkv, d = 3, 2, 1, 8
    cfg = LlamaConfig(name="t", n_layers=1, hidden=16, n_heads=Nh, n_kv_heads=Nkv, head_dim=d,
                      ffn=8, vocab=8, rope_theta=10000.0, max_seq=64, rms_eps=1e-5,
                      tie_embeddings=False)
    qkv = rng.standard_normal((R, (Nh + 2 * Nkv) * d)).astype(np.float32)
    cos, sin = cos_sin(np.array([0, 5, 9]), rope_for(cfg))
    out = qkv.copy()
    n = R * (Nh + Nkv) * (d // 2)
    k.rope[-(-n // k.block), k.block](out, cos, sin, Nh + Nkv, d)
    heads = f64(qkv[:, :(Nh + Nkv) * d]).reshape(R, Nh + Nkv, d)
    ex = apply_rope(heads, f64(cos), f64(sin)).reshape(R, -1)
    # x1 c - x2 s: two products and a difference, three roundings on |x1 c| + |x2 s| <= |x1|+|x2|
    half = d // 2
    mag = (np.abs(heads[..., :half]) + np.abs(heads[..., half:]))
    assert np.all(np.abs(out[:, :(Nh + Nkv) * d] - ex) <= gamma(3) * np.tile(mag, 2).reshape(R, -1))
    assert np.array_equal(out[:, (Nh + Nkv) * d:], qkv[:, (Nh + Nkv) * d:])      # v untouched


def _attention_case(rng, Nh=2, Nkv=1, d=8, S=12):
    """Three rows: slot 1 decoding at position 6, slot 0 prefilling positions 0..1, a pad row."""
    slots, pos = np.array([1, 0, 0, -1]), np.array([6, 0, 1, 2])
    R = len(slots)
    qkv = rng.standard_normal((R, (Nh + 2 * Nkv) * d)).astype(np.float32)
    kt = np.zeros((2, Nkv, d, S), np.float32)
    v = np.zeros((2, Nkv, S, d), np.float32)
    kt[1, :, :, :6] = rng.standard_normal((Nkv, d, 6))       # slot 1's earlier keys/values
    v[1, :, :6] = rng.standard_normal((Nkv, 6, d))
    return Nh, Nkv, d, S, slots, pos, qkv, kt, v


def test_fill_kv_stores_k_transposed_and_v_as_is(k):
    rng = np.random.default_rng(3)
    Nh, Nkv, d, S, slots, pos, qkv, kt, v = _attention_case(rng, Nkv=2, d=6)
    kt0, v0 = kt.copy(), v.copy()
    # segments (slot, first row, start, n): slot 1 one row at 6, slot 0 two rows at 0
    seg = [np.array(c, np.int32) for c in ([1, 0], [0, 1], [6, 0], [1, 2])]
    T = k.tile
    k.fill_kv[(-(-d // T), -(-2 // T), 2 * Nkv), (T, T)](qkv, *seg, kt, v, Nh)
    exp_kt, exp_v = kt0, v0
    for slot, row, start, n in zip(*seg):
        for i in range(n):
            kk = qkv[row + i, Nh * d:(Nh + Nkv) * d].reshape(Nkv, d)
            vv = qkv[row + i, (Nh + Nkv) * d:].reshape(Nkv, d)
            exp_kt[slot, :, :, start + i] = kk
            exp_v[slot, :, start + i] = vv
    assert np.array_equal(kt, exp_kt) and np.array_equal(v, exp_v)    # copies: exact


def test_attention_kernels_match_float64_with_derived_bound(k):
    """qkt -> softmax_rows -> softmax_v over per-row lengths (GQA, a pad row) against float64."""
    rng = np.random.default_rng(4)
    Nh, Nkv, d, S, slots, pos, qkv, kt, v = _attention_case(rng)
    G, R = Nh // Nkv, len(slots)
    # the prefill rows' own keys, as fill_kv leaves them
    kt[0, :, :, :2] = qkv[1:3, Nh * d:(Nh + Nkv) * d].reshape(2, Nkv, d).transpose(1, 2, 0)
    v[0, :, :2] = qkv[1:3, (Nh + Nkv) * d:].reshape(2, Nkv, d).transpose(1, 0, 2)
    kt[1, :, :, 6] = qkv[0, Nh * d:(Nh + Nkv) * d].reshape(Nkv, d)
    v[1, :, 6] = qkv[0, (Nh + Nkv) * d:].reshape(Nkv, d)
    row_len = np.where(slots >= 0, pos + 1, 0).astype(np.int32)
    row_slot = np.maximum(slots, 0).astype(np.int32)
    L = int(row_len.max())
    scale = np.float32(d ** -0.5)
    scores = np.zeros((R * Nh, L), np.float32)
    out = np.full((R, Nh * d), np.nan, np.float32)
    B, W = k.block, k.warps_per_block
    k.qkt[(-(-L // B), R * Nh), B](qkv, kt, row_slot, row_len, scores, Nh, G, scale)
    k.softmax_rows[-(-(R * Nh) // W), 32 * W](scores, row_len, Nh)
    k.softmax_v[(-(-d // B), R * Nh), B](scores, v, row_slot, row_len, out, Nh, G)
    for r in range(R):
        n = row_len[r]
        if n == 0:
            assert np.all(out[r] == 0.0)                 # a padding row: zeros, no NaN
            continue
        for h in range(Nh):
            q = f64(qkv[r, h * d:(h + 1) * d])
            K = f64(kt[row_slot[r], h // G, :, :n]).T                   # [n, d]
            V = f64(v[row_slot[r], h // G, :n])                         # [n, d]
            s = K @ q * float(scale)
            p = np.exp(s - s.max())
            p /= p.sum()
            # scores: d products summed (gamma_d) then * scale (u): |ds| <= E_s
            E_s = ((gamma(d) + U) * (np.abs(K) @ np.abs(q)) * float(scale)).max()
            # softmax of perturbed scores: |p'/p - 1| <= e^{2 E_s} - 1; its own exp, n-term sum,
            # reciprocal and product round by <= gamma_{n+3} relative
            g = gamma(n + 3)
            eps_p = math.expm1(2 * E_s) * (1 + g) + g
            # sum_j p_j v_j in float32: gamma_n on top of the probabilities' error
            bound = (eps_p + gamma(n) * (1 + eps_p)) * (p @ np.abs(V))
            assert np.all(np.abs(scores[r * Nh + h, :n] - p) <= eps_p * p)
            assert np.all(np.abs(out[r, h * d:(h + 1) * d] - p @ V) <= bound)


def test_silu_mul(k):
    rng = np.random.default_rng(5)
    R, F = 2, 12
    gu = (rng.standard_normal((R, 2 * F)) * 3).astype(np.float32)
    out = np.zeros((R, F), np.float32)
    k.silu_mul[-(-(R * F) // k.block), k.block](gu, out)
    g, u = f64(gu[:, :F]), f64(gu[:, F:])
    ex = g / (1 + np.exp(-g)) * u
    # exp (correctly rounded or better in the simulator), +1, /, *: gamma_4 relative, plus the
    # exp's error on 1 + e^-g is at most u relative of e^-g <= of the sum
    assert np.all(np.abs(out - ex) <= gamma(5) * np.abs(ex))


def test_argmax_decoder_bookkeeping(k):
    """Rows: empty (length 0), ordinary, EOS chosen, reaches max_len, a tie (lowest id wins)."""
    V, H, eos, max_len = 37, 5, 7, 10
    rng = np.random.default_rng(6)
    logits = rng.standard_normal((5, V)).astype(np.float32)
    logits[2, eos] = 9.0
    logits[4, [3, 20, 35]] = 9.0                    # three equal maxima, in different threads
    lengths = np.array([0, 4, 5, 9, 2], np.int32)
    tokens = np.full(5, -2, np.int32)
    emb = rng.standard_normal((V, H)).astype(np.float32)
    x_next = np.zeros((5, H), np.float32)
    k.argmax_decode[5, k.block](logits, lengths, tokens, eos, max_len, emb, x_next)
    want = [-1] + [int(np.argmax(logits[r])) for r in range(1, 5)]     # numpy: first maximum
    assert tokens.tolist() == want and want[4] == 3
    # lengths: empty stays 0; +1; EOS frees the row; 9 + 1 = max_len frees it; +1
    assert lengths.tolist() == [0, 5, 0, 0, 3]
    live = [1, 4]
    assert np.array_equal(x_next[live], emb[[want[r] for r in live]])
    assert not x_next[[0, 2, 3]].any()                 # rows that end get no next input


ARGMAX_EDGE_ROWS = ("all NaN", "all -inf", "a NaN among finite values", "-inf and one finite",
                    "+inf twice")


def argmax_edge_logits(V: int) -> np.ndarray:
    """Rows np.argmax answers without a finite maximum to find: all NaN -> 0 (NaN counts as the
    largest, the first one wins), all -inf -> 0 (every entry ties), a NaN at 29 among finite
    values -> 29, -inf everywhere but 17 -> 17, +inf at 30 and 4 -> 4."""
    rng = np.random.default_rng(7)
    logits = rng.standard_normal((5, V)).astype(np.float32)
    logits[0] = np.nan
    logits[1] = -np.inf
    logits[2, 29] = np.nan
    logits[3] = -np.inf
    logits[3, 17] = 0.5
    logits[4, [30, 4]] = np.inf
    return logits


def test_argmax_decoder_rows_without_a_finite_maximum(k):
    """An all-NaN or all -inf row used to leave every thread's index at its start value V, so
    the kernel returned token V and read emb[V], one row past the table (the simulator raises
    IndexError there; a GPU reads whatever lies behind it). The kernel now picks as np.argmax
    does, NaN included: the first NaN if there is one, else the first maximum."""
    V, H, eos, max_len = 37, 5, 2, 64
    logits = argmax_edge_logits(V)
    lengths = np.full(5, 3, np.int32)
    tokens = np.full(5, -2, np.int32)
    emb = np.random.default_rng(8).standard_normal((V, H)).astype(np.float32)
    x_next = np.zeros((5, H), np.float32)
    k.argmax_decode[5, k.block](logits, lengths, tokens, eos, max_len, emb, x_next)
    want = [int(np.argmax(row)) for row in logits]
    assert want == [0, 0, 29, 17, 4]
    assert tokens.tolist() == want, dict(zip(ARGMAX_EDGE_ROWS, tokens.tolist()))
    assert lengths.tolist() == [4] * 5
    assert np.array_equal(x_next, emb[want])


def bank_ways(addresses) -> int:
    """The worst n-way shared-memory bank conflict of one warp's float accesses: distinct
    addresses per bank (32 banks of 4 bytes; lanes reading one address share a broadcast)."""
    banks: dict[int, set] = {}
    for a in addresses:
        banks.setdefault(a % 32, set()).add(a)
    return max(len(v) for v in banks.values())


@pytest.mark.parametrize("pitch, fill_ways, gemm_ways", [(17, 2, 1), (16, 8, 8)])
def test_padded_tile_bank_conflicts_as_the_comment_derives(pitch, fill_ways, gemm_ways):
    """kernels.py's comment on its [16][17] shared tiles, counted lane by lane for every warp of
    a (16, 16) block (lane t: tx = t % 16, ty = t // 16): fill_kv reads tile_k[tx][ty] (two
    columns per warp), gemm_nt reads w_tile[tx][kk] (one column, kk the same in all lanes)."""
    T = 16
    fill = gemm = 0
    for warp in range(T * T // 32):
        lanes = range(32 * warp, 32 * warp + 32)
        fill = max(fill, bank_ways([(t % T) * pitch + t // T for t in lanes]))
        for kk in range(T):
            gemm = max(gemm, bank_ways([(t % T) * pitch + kk for t in lanes]))
    assert (fill, gemm) == (fill_ways, gemm_ways)


def test_simulated_backend_refuses_a_real_size_model(monkeypatch):
    """cuda-simulated would run a 135M model for hours: the check is on the hidden size."""
    from llamanb.cuda import backend
    from llamanb.errors import LlamanbError

    monkeypatch.setattr(backend, "SIM_MAX_HIDDEN", 8)

    class W:                                     # only .config is read before the refusal
        config = type("C", (), {"hidden": 9})()

    with pytest.raises(LlamanbError, match="tiny models only.*hidden 9"):
        backend.CudaSimBackend(W())


def test_the_simulator_quirks_the_kernels_are_written_around(k):
    """Why kernels.py reduces through shared memory under the simulator and puts every
    cuda.shared.array on its own line: numba-cuda's simulator (numba_cuda/numba/cuda/simulator/)
    implements no warp shuffles and no syncwarp, and gives two allocations made on one source
    line the same buffer. If a numba-cuda release changes either, this test says so."""
    import importlib

    from numba.cuda.simulator.kernelapi import FakeCUDAModule

    assert not hasattr(FakeCUDAModule, "shfl_xor_sync") and not hasattr(FakeCUDAModule, "syncwarp")
    # the simulator swaps its fake module for a kernel's GLOBAL `cuda` (not a local or closure)
    globals()["cuda"] = importlib.import_module("numba.cuda")
    float32 = np.float32

    @cuda.jit  # noqa: F821  (the module global set above)
    def two_on_one_line(x, out):
        a = cuda.shared.array(4, float32); b = cuda.shared.array(4, float32)  # noqa: E702
        i = cuda.threadIdx.x
        a[i] = x[i]
        b[i] = 10 * x[i]
        cuda.syncthreads()
        out[i] = a[i]

    out = np.zeros(4, np.float32)
    two_on_one_line[1, 4](np.arange(4, dtype=np.float32), out)
    assert out.tolist() == [0.0, 10.0, 20.0, 30.0]           # a is b: b's writes show through a
